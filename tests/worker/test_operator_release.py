"""An operator's release of a running task's lock (``celery redislock release``, the web page)
sticks: the task's renewal does not take the lock back, it reports the release (WARNING, the
``lock_lost`` signal with no new holder, ``request.redislock.lost``), and a second call runs."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.engine.keys import released_key
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.web import create_app
from celery_redislock.signals import lock_lost, lock_retaken
from tests.harness import module_env

from .conftest import poll

#: Short, so the renewal (every third of it) comes soon after the release.
LOCK_TIMEOUT = 3


@contextmanager
def renewal_reports() -> Iterator[list[tuple[str, str | None]]]:
    """What the renewal reports while the block runs: ``("lost" | "retaken", new holder)``."""
    seen: list[tuple[str, str | None]] = []

    def on_lost(sender: Any = None, new_holder: str | None = None, **_: Any) -> None:
        seen.append(("lost", new_holder))

    def on_retaken(sender: Any = None, new_holder: str | None = None, **_: Any) -> None:
        seen.append(("retaken", new_holder))

    lock_lost.connect(on_lost, weak=False)
    lock_retaken.connect(on_retaken, weak=False)
    try:
        yield seen
    finally:
        lock_lost.disconnect(on_lost)
        lock_retaken.disconnect(on_retaken)


def release_with_the_cli(tmp_path: Path, urls: dict[str, str], key: str) -> str:
    """``celery redislock release KEY --yes`` as an operator runs it; what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "opsapp", "redislock", "release", key, "--yes"],
        cwd=write_ops_app(tmp_path, urls),
        env=module_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def release_with_the_page(app: Celery, key: str) -> None:
    page = create_app(app, allow_release=True, poll_interval=60)
    try:
        client = page.test_client()
        confirm = client.get("/release", query_string={"key": key}).get_data(as_text=True)
        token = re.search(r'name="csrf_token" value="([^"]+)"', confirm)
        holder = re.search(r'name="holder" value="([^"]+)"', confirm)
        assert token and holder, confirm
        form = {"key": key, "holder": holder.group(1), "csrf_token": token.group(1)}
        done = client.post("/release", data=form, follow_redirects=True)
        assert "Released 1 of 1 lock(s)" in done.get_data(as_text=True)
    finally:
        page.extensions["redislock"].stop()


@pytest.mark.parametrize("by", ["cli", "page"])
def test_a_lock_released_by_an_operator_is_not_taken_back_by_its_running_task(
    make_app: Callable[..., Celery],
    worker: Callable[..., Any],
    locks: redis.Redis,
    urls: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    by: str,
) -> None:
    app = make_app()
    started, gate = threading.Event(), threading.Event()
    lost: list[bool] = []

    @app.task(base=SingletonTask, shared=False, bind=True, name="ops.rebuild", lock_timeout=LOCK_TIMEOUT)
    def rebuild(self: Any, tenant: int) -> str:
        started.set()
        assert gate.wait(30)
        lost.append(self.request.redislock.lost)
        return "done"

    key = runtime_for(app).plan(app.tasks[rebuild.name], None).key(rebuild, (1,), {})
    caplog.set_level(logging.WARNING, logger="celery_redislock")
    with renewal_reports() as seen, worker(app, pool="threads", concurrency=2):
        first = rebuild.delay(1)
        assert started.wait(30)
        holder = locks.get(key)
        assert holder is not None and first.id in holder.decode()
        if by == "cli":
            assert release_with_the_cli(tmp_path, urls, key).startswith(f"Released {key} (held by ")
        else:
            release_with_the_page(app, key)
        # The next renewal (within a third of LOCK_TIMEOUT) reports it, one way or the other.
        assert poll(lambda: seen, 30), "no renewal reported the release"
        assert seen == [("lost", None)]
        assert locks.get(key) is None  # not taken back
        assert locks.exists(released_key(key)) == 0  # the note was read, and dropped
        assert any(
            "released by an operator" in record.getMessage() and key in record.getMessage()
            for record in caplog.records
        ), caplog.text
        # The lock is free: the same call runs now, beside the first.
        started.clear()
        second = rebuild.delay(1)
        assert started.wait(30)
        gate.set()
        assert (first.get(timeout=30), second.get(timeout=30)) == ("done", "done")
    assert sorted(lost) == [False, True]  # the first knew it ran without its lock


def test_a_slot_released_by_an_operator_is_not_taken_back_by_its_running_task(
    make_app: Callable[..., Celery],
    worker: Callable[..., Any],
    locks: redis.Redis,
    urls: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # max_concurrency > 1: a semaphore's slot. Seen red before: the renewal took a free slot
    # back (lock_retaken), and the key held the released holder again.
    app = make_app()
    started, gate = threading.Event(), threading.Event()

    @app.task(base=SingletonTask, shared=False, name="ops.sync", lock_timeout=LOCK_TIMEOUT, max_concurrency=2)
    def sync(tenant: int) -> str:
        started.set()
        assert gate.wait(30)
        return "done"

    key = runtime_for(app).plan(app.tasks[sync.name], None).key(sync, (1,), {})
    caplog.set_level(logging.WARNING, logger="celery_redislock")
    with renewal_reports() as seen, worker(app, pool="threads", concurrency=2):
        first = sync.delay(1)
        assert started.wait(30)
        assert locks.zcard(key) == 1
        said = release_with_the_cli(tmp_path, urls, key)
        assert said.startswith(f"Released 1 of 1 holder(s) of {key}"), said
        assert poll(lambda: seen, 30), "no renewal reported the release"
        assert seen == [("lost", None)]
        assert locks.zcard(key) == 0  # not taken back
        assert locks.exists(released_key(key)) == 0  # the note was read, and dropped
        assert any("released by an operator" in record.getMessage() for record in caplog.records), caplog.text
        gate.set()
        assert first.get(timeout=30) == "done"


def write_ops_app(directory: Path, urls: dict[str, str]) -> Path:
    """The operator's app module (``opsapp``) in ``directory``, for ``celery -A opsapp``."""
    (directory / "opsapp.py").write_text(
        "from celery import Celery\n"
        f"app = Celery('opsapp', broker={urls['broker']!r})\n"
        f"app.conf.redislock_url = {urls['locks']!r}\n"
    )
    return directory
