"""``global_rate_limit`` against Celery's own ``rate_limit``, and what the gate costs a task.

    python -m benchmarks.rate_limit [--burst 200] [--rate 20/s] [--workers 2] [--concurrency 2]
                                    [--n 200] [--repeats 5] [--redis-server ...]

One redis-server (broker, results, locks), ``--workers`` prefork workers of ``--concurrency``
processes each, the same for every task measured:

- **burst**: ``--burst`` calls sent at once to a task limited to ``--rate``, once with this
  package's ``global_rate_limit`` and once with Celery's ``rate_limit`` (a token bucket in each
  worker instance, so about workers x the rate in all). Each body records its start (the
  host's clock, the Redis server's too); the figures are the most starts any window of one period holds (by
  those reads, which come a few ms after the decision, and for ours by the limiter's log, the
  decisions' own server times), and the starts per period over the drain (the mean over its
  whole periods, counted from the first start).
- **uncontended**: batches of ``--n`` calls, each with arguments of its own, of a
  ``SingletonTask`` with a limit never reached, and of the same task without one, in an order
  shuffled per repeat; the ratio of their throughputs (tasks/s, sent and waited for) is taken
  per repeat (paired) and its median over ``--repeats`` repeats reported (the first repeat, a
  warm-up, left out); and, in this process, the median time of one uncontended decision (the
  gate's one script call) beside a PING's. It is what the gate's one round trip costs a task.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.config.arguments import KeyBuilder
from celery_redislock.contrib.testing import RedisServer, WorkerProcess
from celery_redislock.engine.checks import BadValue
from celery_redislock.engine.rate_limiter import decide
from celery_redislock.engine.rates import parse_rate
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.gates.rate_limit import rate_key
from celery_redislock.integration.runtime import run_function, runtime_for
from tests.harness import GrantRecorder, most_in_a_window, starts_per_period

from .harness import shuffled
from .servers import add_server_option, server_executable

#: The worker's app module: each task records its start (server clock) in db 3.
WORKER_MODULE = """
import time

import redis
from celery import Celery
from celery_redislock import SingletonTask

app = Celery("bench_rate")
app.conf.update(
    broker_url={broker!r}, result_backend={backend!r}, redislock_url={locks!r},
    broker_connection_retry_on_startup=False, worker_prefetch_multiplier=4, result_expires=None,
)
coord = redis.Redis.from_url({coord!r})


def record(tag):
    # The host's clock, which the Redis server's is on this one machine: no round trip (nor a
    # first connection) between the start and its reading.
    coord.rpush("starts:" + tag, repr(time.time()))


@app.task(base=SingletonTask, name="bench_rate.ours", global_rate_limit={rate!r})
def ours(n):
    record("ours")
    return n


@app.task(name="bench_rate.celery", rate_limit={rate!r})
def celery_limited(n):
    record("celery")
    return n


@app.task(base=SingletonTask, name="bench_rate.gated", global_rate_limit="1000000/s")
def gated(n):
    return n


@app.task(base=SingletonTask, name="bench_rate.ungated")
def ungated(n):
    return n
"""


@dataclass
class Burst:
    """One burst drained: the most starts any window of one period held (as the bodies read the
    server's clock; and as the limiter logged them, for ours), starts per period, seconds."""

    most_in_a_period: int
    per_period: float
    seconds: float
    most_by_log: int | None = None


def caller(urls: dict[str, str], rate: str) -> Celery:
    """The sending side's app, with the worker's tasks declared alike (their bodies never run)."""
    app = Celery("bench_rate_caller", set_as_current=False)
    app.conf.update(
        broker_url=urls["broker"],
        result_backend=urls["backend"],
        redislock_url=urls["locks"],
        result_expires=None,
    )
    app.task(base=SingletonTask, name="bench_rate.ours", global_rate_limit=rate, shared=False)(_never)
    app.task(name="bench_rate.celery", rate_limit=rate, shared=False)(_never)
    app.task(base=SingletonTask, name="bench_rate.gated", global_rate_limit="1000000/s", shared=False)(_never)
    app.task(base=SingletonTask, name="bench_rate.ungated", shared=False)(_never)
    return app


def _never(n: int) -> int:
    raise AssertionError("runs in the worker only")


def burst(app: Celery, coord: redis.Redis, locks: redis.Redis, tag: str, calls: int, period: float) -> Burst:
    task = app.tasks[f"bench_rate.{tag}"]
    recorder = GrantRecorder(locks, partition_of(app, task)) if tag == "ours" else None
    began = time.monotonic()
    results = [task.delay(n) for n in range(calls)]
    for result in results:
        result.get(timeout=600)
    seconds = time.monotonic() - began
    grants = recorder.stop() if recorder is not None else None
    times = sorted(float(t) for t in coord.lrange(f"starts:{tag}", 0, -1))
    per_period = starts_per_period(times, period)
    most_by_log = None if grants is None else most_in_a_window(grants, period)
    return Burst(most_in_a_window(times, period), per_period, seconds, most_by_log)


def partition_of(app: Celery, task: Any) -> str:
    """The log key of ``task``'s one partition (no ``rate_limit_key``), as the workers name it."""
    runtime = runtime_for(app)
    builder = KeyBuilder(runtime.settings.key_prefix, task.name, run_function(type(task)), ())
    return rate_key(builder.key((0,), {}, task))


def batch_rate(app: Celery, tag: str, n: int, first: int) -> float:
    """Tasks/s of ``n`` calls of ``tag``, sent and waited for."""
    task = app.tasks[f"bench_rate.{tag}"]
    began = time.perf_counter()
    results = [task.delay(i) for i in range(first, first + n)]
    for result in results:
        result.get(timeout=120)
    return n / (time.perf_counter() - began)


def decision_us(client: redis.Redis, calls: int) -> tuple[float, float]:
    """Median µs of one uncontended decision (the gate's one script call, a limit never reached)
    and of one PING on the same connection, over ``calls`` of each, interleaved."""
    scripts = ScriptRunner(client)
    rate = parse_rate("1000000/s")
    decide(scripts, "bench:rate:warm", rate, "warm", reserve=True)  # the script loaded
    decisions, pings = [], []
    for i in range(calls):
        began = time.perf_counter()
        decide(scripts, "bench:rate:decide", rate, str(i), reserve=True)
        decisions.append(time.perf_counter() - began)
        began = time.perf_counter()
        client.ping()
        pings.append(time.perf_counter() - began)
    return statistics.median(decisions) * 1e6, statistics.median(pings) * 1e6


def run(args: argparse.Namespace) -> dict[str, Any]:
    rate = parse_rate(args.rate)
    with RedisServer(server_executable(args.redis_server)) as server, tempfile.TemporaryDirectory() as tmp:
        base = f"redis://127.0.0.1:{server.port}"
        urls = {"broker": f"{base}/0", "backend": f"{base}/1", "locks": f"{base}/2", "coord": f"{base}/3"}
        Path(tmp, "bench_rate_worker.py").write_text(
            textwrap.dedent(WORKER_MODULE.format(rate=args.rate, **urls))
        )
        workers = [
            WorkerProcess(Path(tmp), "bench_rate_worker", ["-c", str(args.concurrency), "-n", f"w{i}@bench"])
            for i in range(args.workers)
        ]
        app = caller(urls, args.rate)
        coord, locks = server.client(db=3), server.client(db=2)
        try:
            for worker in workers:
                worker.wait_ready()
            bursts = {
                tag: burst(app, coord, locks, tag, args.burst, rate.period) for tag in ("ours", "celery")
            }
            ratios: list[float] = []
            first = 0
            for repeat in range(args.repeats + 1):
                rates: dict[str, float] = {}
                for tag in shuffled(["gated", "ungated"], repeat):
                    rates[tag] = batch_rate(app, tag, args.n, first)
                    first += args.n
                if repeat:  # the first, a warm-up
                    ratios.append(rates["gated"] / rates["ungated"])
        finally:
            app.close()
            coord.close()
            locks.close()
            for worker in workers:
                worker.stop()
        decision, ping = decision_us(server.client(db=4), args.decisions)
    return {"rate": rate, "bursts": bursts, "ratios": ratios, "decision_us": decision, "ping_us": ping}


def report(figures: dict[str, Any], args: argparse.Namespace) -> str:
    rate, bursts, ratios = figures["rate"], figures["bursts"], figures["ratios"]
    unit = {1: "s", 60: "min", 3600: "h"}[rate.period]
    lines = [
        f"Burst of {args.burst} calls on {rate} ({args.workers} prefork workers, -c {args.concurrency}):",
        "",
        f"| limiter | most starts in any {unit}: bodies' clock reads | by the limiter's log "
        f"| starts per {unit} over the drain | drained in |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {"ours": "`global_rate_limit` (this package)", "celery": "Celery's `rate_limit`"}
    for tag, drained in bursts.items():
        logged = "-" if drained.most_by_log is None else str(drained.most_by_log)
        lines.append(
            f"| {names[tag]} | {drained.most_in_a_period} | {logged} | {drained.per_period:.1f} "
            f"| {drained.seconds:.1f} s |"
        )
    lines += [
        "",
        f"Uncontended: a `SingletonTask` with a limit never reached vs the same without one, "
        f"tasks/s sent and waited for, batches of {args.n}: median ratio {statistics.median(ratios):.3f}x "
        f"over {len(ratios)} paired repeats (each: {', '.join(f'{r:.3f}' for r in ratios)}).",
        "",
        f"One uncontended decision (the gate's one script call): {figures['decision_us']:.0f} µs, "
        f"a PING on the same connection {figures['ping_us']:.0f} µs (medians of {args.decisions}).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rate_limit", description=__doc__)
    parser.add_argument("--burst", type=int, default=200, help="calls in each burst")
    parser.add_argument("--rate", default="20/s", help="the limit, in Celery's format")
    parser.add_argument("--workers", type=int, default=2, help="worker instances")
    parser.add_argument("--concurrency", type=int, default=2, help="pool processes per worker")
    parser.add_argument("--n", type=int, default=200, help="calls per uncontended batch")
    parser.add_argument("--repeats", type=int, default=5, help="paired repeats (+1 warm-up)")
    parser.add_argument("--decisions", type=int, default=2000, help="decisions and PINGs timed")
    add_server_option(parser)
    args = parser.parse_args(argv)
    try:
        parse_rate(args.rate)
    except BadValue as exc:
        parser.error(f"--rate {exc}")
    print(report(run(args), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
