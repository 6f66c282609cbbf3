"""`celery -A app redislock list|purge` and what the modes keep: a debounced burst's keys, left
by `purge` while its calls are queued, gone once its last call came due in a real worker."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess

from . import test_cli
from .mode_harness import node, skipped
from .test_cli import Run
from .test_debounce import INDEX

#: The fixture of test_cli: an app module, and the real celery program run on it.
celery_cmd = test_cli.celery_cmd


def summary(celery: Run, *args: str) -> str:
    result = celery("redislock", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_purge_leaves_a_queued_burst_s_keys_and_its_last_call_deletes_them(
    celery_cmd: Callable[..., Run],
    urls: dict[str, str],
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    celery = celery_cmd()
    debounced = INDEX.with_options(debounce=0.3)
    # Sent before any worker runs: the burst's record stays until its calls come due.
    burst = [debounced.sender(make_app()).delay(7, version) for version in range(4)]
    assert summary(celery, "list").splitlines()[-1] == "0 lock(s) held, 1 mode key(s)"
    purged = summary(celery, "purge", "--yes").splitlines()
    assert purged[0] == "Purged 0 lock(s)"
    assert purged[1].startswith("Left 1 mode key(s): each records calls still queued"), purged
    # Left in place, the record still picks the burst's last call: one run, the rest skipped.
    debounced.start(worker_process, urls, "-c", "2", "-n", node("debounce"))
    assert burst[-1].get(timeout=15) == 3
    for call in burst[:-1]:
        assert skipped(call).holder_task_id == burst[-1].id
    # Every call has come due: nothing of the burst is left in Redis.
    assert summary(celery, "list") == "0 lock(s) held"
    assert summary(celery, "purge", "--yes") == "Purged 0 lock(s)"
