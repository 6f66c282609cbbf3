"""How fast a gevent worker drains a backlog on a Redis broker: a plain task against SingletonTask.

    python -m benchmarks.gevent_drain [--n 30] [--concurrency 1,2] [--prefetch 1,4]

For each task, ``-c`` and prefetch multiplier: a fresh ``celery worker -P gevent`` on a
redis-server of its own, ``n`` calls sent (distinct arguments: none is a duplicate), and the
span from the first body's start to the last body's end by the worker's clock. It tells a slow
gevent worker's cause apart: the lock's, when only SingletonTask is slow; Celery's consume
loop, when the plain task is just as slow.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll

from .servers import add_server_option, server_executable

#: Tasks measured: the name the worker module registers and the row's label.
TASKS = {"drain.plain": "Task", "drain.single": "SingletonTask"}

WORKER_MODULE = """
import time

import redis
from celery import Celery

from celery_redislock import SingletonTask

app = Celery("drain")
app.conf.update(
    broker_url={broker!r},
    redislock_url={locks!r},
    task_ignore_result=True,
    broker_connection_retry_on_startup=False,
    task_default_queue="celery",
)
ends = redis.Redis.from_url({ends!r})


@app.task(name="drain.plain")
def plain(i):
    ends.rpush("ends", repr(time.time()))


@app.task(base=SingletonTask, name="drain.single")
def single(i):
    ends.rpush("ends", repr(time.time()))
"""


def rate(stamps: Sequence[float]) -> tuple[float, float]:
    """(span in seconds, calls per second) of calls that ended at ``stamps``; the first call's
    end starts the span, so it counts the calls after it."""
    if len(stamps) < 2:
        return 0.0, 0.0
    span = max(stamps) - min(stamps)
    return span, (len(stamps) - 1) / span if span > 0 else float("inf")


def row(task: str, concurrency: int, prefetch: int, stamps: Sequence[float], n: int) -> str:
    span, per_second = rate(stamps)
    return (
        f"| {TASKS[task]} | {concurrency} | {prefetch} | {len(stamps)}/{n} | {span:.2f} | {per_second:.1f} |"
    )


def drain(
    server: RedisServer, workdir: Path, task: str, concurrency: int, prefetch: int, n: int
) -> list[float]:
    """End times of ``n`` calls of ``task`` on a fresh gevent worker (those that ended in 10 min)."""
    base = f"redis://127.0.0.1:{server.port}"
    ends = server.client(db=3)
    server.client(db=0).flushdb()
    ends.delete("ends")
    args = ["-P", "gevent", "-c", str(concurrency), "--prefetch-multiplier", str(prefetch)]
    worker = WorkerProcess(workdir, "drainapp", args)
    try:
        worker.wait_ready()
        client = Celery("drain-client", broker=f"{base}/0")
        for i in range(n):
            client.send_task(task, args=[i])
        poll(lambda: ends.llen("ends") >= n, 600, 0.1)
        return [float(stamp) for stamp in ends.lrange("ends", 0, -1)]
    finally:
        worker.stop()
        ends.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=30, help="calls per run")
    parser.add_argument("--concurrency", default="1,2", help="-c values, comma-separated")
    parser.add_argument("--prefetch", default="1,4", help="prefetch multipliers, comma-separated")
    add_server_option(parser)
    options = parser.parse_args(argv)
    concurrencies = [int(value) for value in options.concurrency.split(",")]
    prefetches = [int(value) for value in options.prefetch.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="gevent-drain-"))
    print("| task | -c | prefetch | calls | span (s) | calls/s |\n|---|---|---|---|---|---|")
    with RedisServer(server_executable(options.redis_server)) as server:
        base = f"redis://127.0.0.1:{server.port}"
        source = WORKER_MODULE.format(broker=f"{base}/0", locks=f"{base}/2", ends=f"{base}/3")
        (workdir / "drainapp.py").write_text(source)
        for task in TASKS:
            for concurrency in concurrencies:
                for prefetch in prefetches:
                    stamps = drain(server, workdir, task, concurrency, prefetch, options.n)
                    print(row(task, concurrency, prefetch, stamps, options.n), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
