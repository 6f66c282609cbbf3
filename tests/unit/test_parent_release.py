"""Which holders the worker's parent frees for a request whose process it cannot name: only
those of processes that no longer run (another delivery of the same message may be alive)."""

from __future__ import annotations

import subprocess
import sys

from celery_redislock.engine.holders import holder_prefix, queued_id
from celery_redislock.integration.parent_release import _processes


class Holders:
    """An engine as far as the choice reads it: who holds the key."""

    def __init__(self, *holders: str) -> None:
        self.held = holders

    def holders(self, key: str) -> tuple[str, ...]:
        return self.held


def dead_pid() -> int:
    """The pid of a process that ran and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_without_a_pid_only_the_holders_of_processes_gone_are_chosen() -> None:
    dead, live = dead_pid(), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        engine = Holders(
            f"{holder_prefix('t', 'celery@host', dead)}1",
            f"{holder_prefix('t', 'celery@host', live.pid)}2",  # the live delivery of "t"
            f"{holder_prefix('u', 'celery@host', dead)}3",  # another task id
            f"{holder_prefix('t', 'other@host', dead)}4",  # another worker: its pid is not ours
            queued_id("t"),
        )
        chosen = _processes(engine, "k", "t", "celery@host", None, "it died")  # type: ignore[arg-type]
        assert chosen == [(dead, f"it died (pid {dead})")]
    finally:
        live.kill()
        live.wait()


def test_a_known_pid_is_chosen_without_reading_the_holders() -> None:
    chosen = _processes(Holders(), "k", "t", "celery@host", 1234, "killed")  # type: ignore[arg-type]
    assert chosen == [(1234, "killed")]
