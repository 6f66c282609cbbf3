"""What CPU and a lock's round trip cost the worker's throughput, by where they are spent: in the
prefork worker's parent (which receives every message and hands it to a pool child) or in a
pool child (where the task runs, and a lock taken at execution with it).

    python -m benchmarks.placement [--us 25,50,100] [--n 300] [--repeats 30] [--redis-server ...]

The worker benchmark's own servers and prefork worker (``harness.Bench``) drain a backlog of
one probe task (``workerapp.PROBE``, a noop), as in its scenario 1b: plain (nothing more), each
size of CPU spun in the parent as it receives the message (a ``task_received`` receiver: where
a lock taken at hand-over would be) or in the child before the body (where ``SingletonTask``
takes its lock), and one round trip to the lock Redis made in either (a ``SET NX`` on a raw
socket, its reply waited for), the variants interleaved per repeat. Reported: each one's
tasks/s over plain's in the same repeat (median, 95 % interval) and the parent's and the
children's CPU µs a task over plain's (the scheduler's count, to the nanosecond). It judges the
benchmarks page's structural option (take the lock in the parent at hand-over, so the child pays one
round trip fewer): work moved from the child to the parent is worth moving only if it costs
the throughput less there."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .harness import Bench, Config, _mean_cpu, _paired_ci, _paired_ratio, run_seconds, shuffled
from .servers import add_server_option
from .workerapp import CHILD_TRIP, CHILD_US, PARENT_TRIP, PARENT_US, PROBE

PLAIN = "plain"


@dataclass(frozen=True)
class Variant:
    name: str
    #: the parent's or the child's
    where: str = ""
    #: µs of CPU spun there
    us: float = 0.0
    #: one round trip to the lock Redis made there
    trip: bool = False

    def headers(self) -> dict[str, object]:
        parent, child = self.where == "parent", self.where == "child"
        return {
            PARENT_US: self.us if parent else 0,
            CHILD_US: self.us if child else 0,
            PARENT_TRIP: self.trip and parent,
            CHILD_TRIP: self.trip and child,
        }

    def label(self) -> str:
        what = f"{self.us:g} µs" if self.us else "one round trip (`SET NX`, its reply waited for)"
        return f"{what} in the {self.where}"


@dataclass
class Figures:
    rates: list[float] = field(default_factory=list)
    cpu: list[dict[str, float]] = field(default_factory=list)


def variants(sizes: list[float], trips: bool = True) -> list[Variant]:
    """Plain, then each size spun in the parent and in the child, then (with ``trips``) one
    round trip made in each."""
    out = [Variant(PLAIN)]
    for us in sizes:
        out += [Variant(f"parent {us:g}", "parent", us), Variant(f"child {us:g}", "child", us)]
    if trips:
        out += [Variant("parent trip", "parent", trip=True), Variant("child trip", "child", trip=True)]
    return out


def measure(bench: Bench, spins: list[Variant], n: int, repeats: int) -> dict[str, Figures]:
    """Each variant's tasks/s and CPU a task per repeat (the first repeat, a warm-up, left out)."""
    assert bench.app is not None, "the bench is not started"
    task = bench.app.tasks[PROBE]
    figures = {variant.name: Figures() for variant in spins}
    first = 4 * 10**9  # arguments no other scenario uses
    for repeat in range(repeats + 1):
        for variant in shuffled(spins, repeat):
            calls = [(first + i,) for i in range(n)]
            first += n
            drained = bench.drain(task, calls, headers=variant.headers())
            if repeat:
                figures[variant.name].rates.append(n / drained.seconds)
                figures[variant.name].cpu.append(drained.cpu)
    return figures


def table(spins: list[Variant], figures: dict[str, Figures]) -> str:
    plain = figures[PLAIN]
    plain_cpu = _mean_cpu(plain.cpu)
    lines = [
        "| done for each task | tasks/s vs plain (95 % interval) | throughput lost per 10 µs | "
        "parent CPU µs a task over plain's | children's over plain's |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant in spins[1:]:
        row = figures[variant.name]
        ratio = _paired_ratio(row.rates, plain.rates)
        low, high = _paired_ci(row.rates, plain.rates)
        per_10 = f"{(1 - ratio) / variant.us * 1000:.2f} points" if variant.us else ""
        cpu = _mean_cpu(row.cpu)
        lines.append(
            f"| {variant.label()} | {ratio:.3f}x ({low:.3f}-{high:.3f}) | {per_10} "
            f"| {cpu['worker_parent'] - plain_cpu['worker_parent']:+.1f} "
            f"| {cpu['worker_children'] - plain_cpu['worker_children']:+.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.placement", description=__doc__)
    parser.add_argument("--us", default="25,50,100", help="comma-separated µs to spin")
    parser.add_argument("--n", type=int, default=300, help="tasks per batch")
    parser.add_argument("--repeats", type=int, default=30, help="measured repeats (+1 warm-up)")
    add_server_option(parser)
    args = parser.parse_args(argv)
    try:
        sizes = [float(us) for us in args.us.split(",")]
    except ValueError:
        parser.error(f"--us: {args.us!r} is not a comma-separated list of numbers")
    if not sizes or min(sizes) <= 0:
        parser.error(f"--us: {args.us!r}: each size must be more than 0 µs")
    spins = variants(sizes)
    config = Config(n=args.n, repeats=args.repeats, redis_server=args.redis_server, variants=(), probe=True)
    with tempfile.TemporaryDirectory(prefix="redislock-placement-") as workdir:
        bench = Bench(config, Path(workdir))
        bench.cpu_clock = run_seconds
        try:
            bench.start()
            figures = measure(bench, spins, args.n, args.repeats)
        finally:
            bench.stop()
    print(
        f"A backlog of {args.n} probe tasks drained by the worker alone (prefork, 2 processes), "
        f"{args.repeats} repeats; plain: {statistics.median(figures[PLAIN].rates):.0f} tasks/s"
    )
    print()
    print(table(spins, figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
