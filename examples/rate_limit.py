"""A global rate limit: at most 5 starts a second per account across every worker, one run at a
time per document; and ``RedisRateLimiter`` for code outside Celery.

    python examples/rate_limit.py [REDIS_URL]

Without a URL it starts a throwaway redis-server (the ``test`` extra brings one). A worker runs
in this process (threads pool); ``celery -A ... worker`` runs the same task the same way. A call
over its account's limit is not run and not dropped: it is re-queued for its slot, same task id
and arguments, and its result still reaches the caller.
"""

from __future__ import annotations

import bisect
import gc
import sys
import time
from collections import defaultdict
from contextlib import ExitStack

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_redislock import RedisRateLimiter, SingletonTask
from celery_redislock.contrib.testing import RedisServer

STARTS: dict[str, list[float]] = defaultdict(list)


def make_app(url: str) -> Celery:
    base = url.rsplit("/", 1)[0]
    app = Celery("rate_limit_example", broker=f"{base}/0", backend=f"{base}/1", set_as_current=False)
    app.conf.update(redislock_url=f"{base}/2", broker_connection_retry_on_startup=False)

    @app.task(
        base=SingletonTask,
        name="example.sync_document",
        global_rate_limit="5/s",  # across every worker, per account...
        rate_limit_key=["account"],
        lock_key=["document"],  # ...and one run at a time per document
        on_duplicate="retry",
        retry_countdown=0.2,
        max_retries=None,
    )
    def sync_document(account: str, document: str) -> str:
        STARTS[account].append(time.time())
        return f"{account}/{document} synced"

    return app


def with_celery(url: str) -> None:
    app = make_app(url)
    task = app.tasks["example.sync_document"]
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, loglevel="WARNING"):
        calls = [task.delay("acme", f"doc-{n % 4}") for n in range(12)]
        calls += [task.delay("globex", f"doc-{n}") for n in range(3)]
        results = [call.get(timeout=30) for call in calls]
        for call in calls:  # unsubscribed now, while the server is up
            call.backend.remove_pending_result(call)  # type: ignore[attr-defined]  # the Redis backend's
    # So are the results of the re-queued calls (this process ran the worker too): Celery's
    # AsyncResult unsubscribes when it is collected, which fails loudly once Redis is gone.
    gc.collect()
    app.close()
    print(f"{len(results)} calls, every one answered: {results[0]!r} ...")
    for account, starts in sorted(STARTS.items()):
        # A body reads the clock a moment after its start was decided: windows a little short.
        took = max(starts) - min(starts)
        print(
            f"{account}: {len(starts)} ran in {took:.1f}s, at most {most_within(starts, 0.98)} in any second"
        )


def most_within(starts: list[float], seconds: float) -> int:
    """The most of ``starts`` any window of ``seconds`` holds."""
    ordered = sorted(starts)
    return max(bisect.bisect_right(ordered, at + seconds) - first for first, at in enumerate(ordered))


def without_celery(url: str) -> None:
    client = redis.Redis.from_url(url)
    limiter = RedisRateLimiter(client, "example:api", "2/s")
    decisions = [limiter.try_acquire() for _ in range(3)]
    shown = ", ".join("allowed" if d else f"wait {d.wait:.1f}s" for d in decisions)
    began = time.monotonic()
    limiter.acquire()  # blocks until its reserved slot
    print(f"RedisRateLimiter 2/s: {shown}; acquire() waited {time.monotonic() - began:.1f}s")
    client.close()


def main(url: str) -> None:
    with_celery(url)
    without_celery(url)


if __name__ == "__main__":
    with ExitStack() as stack:
        main(sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url)
