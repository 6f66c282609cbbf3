"""A ``celery worker`` subprocess for tests, demos and chaos runs: log to a file, stop by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...integration.liveness import process_alive as alive
from .servers import poll

__all__ = ["WorkerNotReady", "WorkerProcess", "alive", "child_pids"]

#: Options that keep a test worker quiet and quick to start: no peers to meet, no heartbeats.
QUIET = ("--without-gossip", "--without-mingle", "--without-heartbeat")


class WorkerNotReady(RuntimeError):
    """The worker exited, or did not say ``ready.`` in time; the message has its log's tail."""


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a worker's pool)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(child) for child in out.split())


class WorkerProcess:
    """``python -m celery -A <module> worker --loglevel=INFO <args>`` run from ``workdir``.

    Its pool's pids are remembered when it is ready, so ``stop()`` can end, by pid, children
    a killed parent left behind. ``new_session`` keeps a Ctrl-C at a terminal away from it
    (the demo stops it itself).
    """

    def __init__(
        self,
        workdir: Path,
        module: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        logfile: Path | None = None,
        new_session: bool = False,
    ) -> None:
        self.logfile = logfile or workdir / f"{module}-worker.log"
        self.children: set[int] = set()
        if env is None:
            path = os.environ.get("PYTHONPATH")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(workdir), path]))}
        with self.logfile.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", module, "worker", "--loglevel=INFO", *QUIET, *args],
                cwd=workdir,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.logfile.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the worker logs ``ready.``; WorkerNotReady if it exits or the deadline passes."""
        if not poll(lambda: " ready." in self.log() or self.process.poll() is not None, timeout, 0.05):
            raise WorkerNotReady(f"the worker was not ready within {timeout:.0f}s:\n{self.log()[-3000:]}")
        if self.process.poll() is not None:
            raise WorkerNotReady(f"the worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        self.children = set(self.child_pids())

    def child_pids(self) -> list[int]:
        """The pool's processes now."""
        return child_pids(self.pid)

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def stop(self, timeout: float = 20.0) -> None:
        """Warm shutdown (SIGTERM), SIGKILL if it hangs; then, by pid, any pool process left."""
        pool = self.children | set(self.child_pids())
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self._kill(pool)

    def kill(self) -> None:
        """SIGKILL the worker and, by pid, its pool: no shutdown, so nothing is written after
        (a test's teardown; a warm shutdown of a prefork pool takes seconds)."""
        self._kill(self.children | set(self.child_pids()))

    def _kill(self, pool: set[int]) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in pool:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
