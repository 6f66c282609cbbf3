"""How long a prefork child's lock outlives the child: the time from its SIGKILL mid-task to the
lock key's deletion, and, for comparison, to Celery's ``WorkerLostError`` result.

    python -m benchmarks.crash_release [--kills 20] [--redis-server ...] [--json]

One redis-server of its own (broker, results, locks and a coordination database) and one prefork
worker with one child. Each round sends a ``SingletonTask`` with ``lock_timeout=300`` (so the
lock never expires on its own during a round) whose body tells the benchmark its pid and blocks;
the benchmark SIGKILLs that child, polls the lock key every millisecond until it is gone, then
waits for the task's result. Reported: median, min and max over the kills of both times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll

from .servers import add_server_option, server_executable, server_version

TASK = "crash.held"
LOCK_TIMEOUT = 300

WORKER_MODULE = """
import os

import redis
from celery import Celery

from celery_redislock import SingletonTask

app = Celery("crashapp")
app.conf.update(
    broker_url={broker!r},
    result_backend={backend!r},
    redislock_url={locks!r},
    broker_connection_retry_on_startup=False,
    result_expires=None,
)
coord = redis.Redis.from_url({coord!r}, socket_timeout=None)


@app.task(base=SingletonTask, bind=True, name={task!r}, lock_timeout={lock_timeout})
def held(self, n):
    coord.rpush("started", f"{{n}} {{os.getpid()}}")
    coord.blpop("never-opened", timeout=0)  # held until the benchmark kills this process
"""


def measure(kills: int, executable: str, workdir: Path) -> dict[str, list[float]]:
    """Seconds from each child's SIGKILL to its lock's deletion and to its task's result."""
    freed: list[float] = []
    answered: list[float] = []
    with RedisServer(executable) as server:
        base = f"redis://127.0.0.1:{server.port}"
        urls = {"broker": f"{base}/0", "backend": f"{base}/1", "locks": f"{base}/2", "coord": f"{base}/3"}
        module = WORKER_MODULE.format(task=TASK, lock_timeout=LOCK_TIMEOUT, **urls)
        (workdir / "crashapp.py").write_text(textwrap.dedent(module))
        worker = WorkerProcess(workdir, "crashapp", ["-P", "prefork", "-c", "1"])
        app = Celery("crash-client", broker=urls["broker"], backend=urls["backend"], set_as_current=False)
        locks, coord = server.client(db=2), server.client(db=3)
        try:
            worker.wait_ready(timeout=60)
            for n in range(kills):
                result = app.send_task(TASK, args=[n])
                entry = poll(lambda: coord.lpop("started"), 60)
                if entry is None:
                    raise RuntimeError(f"round {n}: the task did not start:\n{worker.log()[-3000:]}")
                child = int(entry.split()[1])
                [key] = list(locks.scan_iter("redislock:*"))
                killed = time.monotonic()
                os.kill(child, signal.SIGKILL)
                while locks.exists(key):  # polled every millisecond: the figure's resolution
                    if time.monotonic() - killed > 60:
                        raise RuntimeError(f"round {n}: the lock outlived its child by 60 s")
                    time.sleep(0.001)
                freed.append(time.monotonic() - killed)
                result.get(timeout=60, propagate=False)
                answered.append(time.monotonic() - killed)
                result.forget()
        finally:
            app.close()
            worker.stop()
            locks.close()
            coord.close()
    return {"lock_freed_s": freed, "result_s": answered}


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(seconds), 4),
        "min": round(min(seconds), 4),
        "max": round(max(seconds), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crash_release", description=__doc__)
    parser.add_argument("--kills", type=int, default=20, help="children killed, one a round")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_server_option(parser)
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error(f"--kills: {args.kills} must be at least 1")
    try:
        executable = server_executable(args.redis_server)
    except ValueError as exc:
        parser.error(str(exc))
    with tempfile.TemporaryDirectory(prefix="redislock-crash-") as workdir:
        times = measure(args.kills, executable, Path(workdir))
    report: dict[str, Any] = {
        "kills": args.kills,
        "server": server_version(executable),
        "lock_timeout_s": LOCK_TIMEOUT,
        "lock_freed_s": summary(times["lock_freed_s"]),
        "result_s": summary(times["result_s"]),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"A prefork child SIGKILLed mid-task, {args.kills} times (lock_timeout {LOCK_TIMEOUT} s, "
        f"{report['server']}): seconds after the kill"
    )
    for name, what in (("lock_freed_s", "lock key deleted"), ("result_s", "WorkerLostError result")):
        figures = report[name]
        print(
            f"  {what:<24} median {figures['median']:.3f}  min {figures['min']:.3f}  max {figures['max']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
