"""A global rate limit: at most 5 starts a second per account across every worker, one run at a
time per document; and ``RedisRateLimiter`` for code outside Celery.

    python examples/rate_limit.py [REDIS_URL]

Without a URL it starts a throwaway redis-server (the ``test`` extra brings one). A worker runs
in this process (threads pool); ``celery -A ... worker`` runs the same task the same way. A call
over its account's limit is not run and not dropped: it is re-queued for its slot, same task id
and arguments, and its result still reaches the caller.

What it prints of the limit is read by the Redis server's clock, the one the limiter decides by:
how long the calls took from the first sent to the last answered, and what the limiter said it
counted in the second before each look. A body starts a moment after its start was decided (on a
busy machine some later than others), so the bodies' own clocks may show one more in a second.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from contextlib import ExitStack
from typing import Any

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_redislock import RedisRateLimiter, SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.signals import task_rate_limited

RAN: Counter[str] = Counter()
#: Task id -> (its partition's log, its rate), for each call re-queued for its slot.
REQUEUED: dict[str, tuple[str, str]] = {}


@task_rate_limited.connect
def requeued(sender: Any, task_id: str, key: str, rate: str, **_: Any) -> None:
    REQUEUED[task_id] = (key, rate)


def make_app(url: str) -> Celery:
    base = url.rsplit("/", 1)[0]
    app = Celery("rate_limit_example", broker=f"{base}/0", backend=f"{base}/1", set_as_current=False)
    app.conf.update(redislock_url=f"{base}/2", broker_connection_retry_on_startup=False)

    @app.task(
        base=SingletonTask,
        name="example.sync_document",
        global_rate_limit="5/s",  # across every worker, per account...
        rate_limit_key=["account"],
        lock_key=["account", "document"],  # ...and one run at a time per document
        on_duplicate="retry",
        retry_countdown=0.2,
        max_retries=None,
    )
    def sync_document(account: str, document: str) -> str:
        RAN[account] += 1
        return f"{account}/{document} synced"

    return app


def with_celery(url: str) -> None:
    app = make_app(url)
    task = app.tasks["example.sync_document"]
    locks = redis.Redis.from_url(app.conf.redislock_url)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, loglevel="WARNING"):
        began = server_time(locks)
        sent = [("acme", task.delay("acme", f"doc-{n % 4}")) for n in range(12)]
        sent += [("globex", task.delay("globex", f"doc-{n}")) for n in range(3)]
        most = watch(locks, sent)
        results = [call.get(timeout=30) for _, call in sent]
        took = server_time(locks) - began
        for _, call in sent:  # unsubscribed now, while the server is up
            call.backend.remove_pending_result(call)  # type: ignore[attr-defined]  # the Redis backend's
    # So are the results of the re-queued calls (this process ran the worker too): Celery's
    # AsyncResult unsubscribes when it is collected, which fails loudly once Redis is gone.
    gc.collect()
    app.close()
    locks.close()
    print(f"{len(results)} calls, every one answered within {took:.2f}s: {results[0]!r} ...")
    for account in sorted(RAN):
        waited = sum(call.id in REQUEUED for name, call in sent if name == account)
        seen = f"; at most {most[account]} starts in a second" if waited else ""
        print(f"{account}: {RAN[account]} ran, {waited or 'none'} re-queued for a slot{seen}")


def server_time(client: redis.Redis) -> float:
    """Now by the Redis server's clock, the one the limiter decides by."""
    seconds, micros = client.time()
    return seconds + micros / 1e6


def watch(client: redis.Redis, sent: list[tuple[str, Any]]) -> Counter[str]:
    """Until every call is answered, ask each account's partition (named by its re-queued calls)
    how many starts it counted in the second that ends now: the most each said (what
    ``celery redislock list`` shows, by the Redis server's clock)."""
    most: Counter[str] = Counter()
    deadline = time.monotonic() + 30
    while not all(call.ready() for _, call in sent) and time.monotonic() < deadline:
        partitions = {name: REQUEUED[call.id] for name, call in sent if call.id in REQUEUED}
        for account, (key, rate) in partitions.items():
            state = RedisRateLimiter(client, key, rate, prefix="").state()
            most[account] = max(most[account], state.started if state else 0)
        time.sleep(0.05)
    return most


def without_celery(url: str) -> None:
    client = redis.Redis.from_url(url)
    limiter = RedisRateLimiter(client, "example:api", "2/s")
    decisions = [limiter.try_acquire() for _ in range(3)]
    shown = ", ".join("allowed" if d else f"next slot in {d.wait:.2f}s" for d in decisions)
    got = limiter.acquire(timeout=5)  # reserves the next free slot, sleeps until it
    print(f"RedisRateLimiter 2/s: {shown}; acquire() {'got that slot' if got else 'timed out'}")
    client.close()


def main(url: str) -> None:
    with_celery(url)
    without_celery(url)


if __name__ == "__main__":
    with ExitStack() as stack:
        main(sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url)
