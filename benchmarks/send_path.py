"""What ``apply_async`` costs the process that sends a task, for plain Celery and each lock, in
one process against a real Redis broker (no worker: the messages stay queued).

    python -m benchmarks.send_path [--n 1000] [--repeats 9] [--variants ...] [--redis-server ...]

Batches of each variant's ``bench.<variant>.noop`` (the worker benchmark's own tasks) in an
order shuffled per repeat, each call with arguments of its own; the figure is the sender's CPU
(user and system, ``time.process_time``) per call, median of the batches. A lock taken at send
(the peers', ``lock_on="enqueue"``) is paid here; a lock taken at execution should cost nothing.
In the worker benchmark's "sent and waited for" scenario the sender shares the two cores with
the worker, so what a send costs there is taken from the worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from celery_redislock.contrib.testing import RedisServer

from .harness import shuffled
from .servers import add_server_option, server_executable
from .workerapp import UNAVAILABLE, VARIANTS, make_app


def cpu_us_per_send(task: Any, n: int, first: int) -> float:
    """Send ``n`` calls of ``task``; the sending process's CPU µs a call."""
    before = time.process_time()
    for i in range(first, first + n):
        task.apply_async((i,))
    return (time.process_time() - before) / n * 1e6


def measure(variants: Sequence[str], n: int, repeats: int, executable: str) -> dict[str, list[float]]:
    """Each variant's CPU µs a send, one figure per batch (the first batch of each, a warm-up,
    left out)."""
    runs: dict[str, list[float]] = {variant: [] for variant in variants}
    with RedisServer(executable) as server:
        base = f"redis://127.0.0.1:{server.port}"
        app = make_app(broker=f"{base}/0", results=f"{base}/1", locks=f"{base}/2", coord=f"{base}/3")
        try:
            first = 0
            for repeat in range(repeats + 1):
                # no variant always first after the flush
                for variant in shuffled(variants, repeat):
                    figure = cpu_us_per_send(app.tasks[f"bench.{variant}.noop"], n, first)
                    first += n
                    if repeat:
                        runs[variant].append(figure)
                server.client().flushall()  # the queued messages and the send-time locks
        finally:
            app.close()
    return runs


def report(runs: Mapping[str, Sequence[float]], n: int) -> str:
    """A Markdown table: each variant's median µs a send, and its difference from plain's."""
    plain = statistics.median(runs["plain"])
    lines = [
        f"Sender CPU per `apply_async`, µs (median of {len(runs['plain'])} batches of {n}):",
        "",
        "| variant | µs per send | over plain |",
        "|---|---:|---:|",
    ]
    for variant, figures in runs.items():
        median = statistics.median(figures)
        lines.append(f"| {variant} | {median:.1f} | {median - plain:+.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.send_path", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="sends per batch")
    parser.add_argument("--repeats", type=int, default=9, help="batches of each variant, interleaved")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated, from: " + ", ".join(VARIANTS) + " (plain is always measured)",
    )
    add_server_option(parser)
    args = parser.parse_args(argv)
    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    variants = ["plain", *(v for v in wanted if v != "plain" and v not in UNAVAILABLE)]
    for variant in wanted:
        if variant in UNAVAILABLE:
            print(f"{variant}: {UNAVAILABLE[variant]}", file=sys.stderr)
    try:
        executable = server_executable(args.redis_server)
    except ValueError as exc:
        parser.error(str(exc))
    print(report(measure(variants, args.n, args.repeats, executable), args.n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
