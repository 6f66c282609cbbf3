"""The example's tasks: one per way of handling a duplicate, plus ``lock_key`` and ``lock_on``.

Each body stands for real work with a short sleep and returns when (and in which process) it
ran, so a caller can check that no two runs of one lock overlapped.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import current_task

from celery_redislock import SingletonTask

from .app import app

#: How long each task "works", in seconds: long enough for duplicates to find it running.
WORK_SECONDS = 2.0


def _work(name: str) -> dict[str, Any]:
    started = time.time()
    # RUNNING: the body runs, so its lock is held (STARTED is stored before the lock is asked
    # for): a caller waiting for it sends its duplicates only then.
    current_task.update_state(state="RUNNING")
    time.sleep(WORK_SECONDS)
    return {"task": name, "pid": os.getpid(), "started": started, "finished": time.time()}


@app.task(base=SingletonTask)
def rebuild_index(tenant_id: int, full: bool = False) -> dict[str, Any]:
    """Defaults (``on_duplicate="skip"``): a second rebuild while one runs would redo the same work."""
    return _work(f"rebuild_index({tenant_id})")


@app.task(base=SingletonTask, lock_key=["user_id"])
def send_report(user_id: int, fmt: str = "pdf") -> dict[str, Any]:
    """One report per user at a time, whatever the format (``lock_key``); routed to the
    ``reports`` queue, whose options (celeryconfig) re-queue a duplicate until the first ends."""
    return _work(f"send_report({user_id}, {fmt})")


@app.task(base=SingletonTask, on_duplicate="raise")
def import_feed(feed: str) -> dict[str, Any]:
    """A duplicate import fails with DuplicateTaskError: it shows up as a failure (Flower, on_failure)."""
    return _work(f"import_feed({feed})")


@app.task(base=SingletonTask, on_duplicate="wait", acquire_timeout=30)
def refresh_cache(name: str) -> dict[str, Any]:
    """A duplicate waits for the running refresh to finish, then refreshes again (it may have
    been asked for because the data changed after the first one started)."""
    return _work(f"refresh_cache({name})")


@app.task(base=SingletonTask, lock_on="enqueue")
def nightly_export(day: str) -> dict[str, Any]:
    """Locked when sent: a second ``delay()`` while it is queued or running sends nothing and
    returns the first call's AsyncResult (a scheduler firing twice exports once)."""
    return _work(f"nightly_export({day})")


@app.task(base=SingletonTask, throttle=60)
def send_digest(team: str) -> dict[str, Any]:
    """At most one digest per team per minute (``throttle``): a call within 60 s of the last
    run's start is a duplicate, even once that run has finished."""
    return _work(f"send_digest({team})")


@app.task(base=SingletonTask, keep_latest=True, lock_key=["doc_id"])
def render_preview(doc_id: int, version: int) -> dict[str, Any]:
    """One render per document at a time, and the latest edit always rendered after it
    (``keep_latest``): edits made while one renders leave one pending render, the newest."""
    return _work(f"render_preview({doc_id}, v{version})")


@app.task(base=SingletonTask, debounce=1, lock_key=["doc_id"])
def reindex_document(doc_id: int, version: int) -> dict[str, Any]:
    """Re-index a document once a burst of edits has settled (``debounce``): one run, with the
    last edit, a second after it."""
    return _work(f"reindex_document({doc_id}, v{version})")
