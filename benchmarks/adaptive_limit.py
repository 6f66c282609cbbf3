"""An adaptive named limit against a real HTTP partner that serves C calls a second and answers 429
(with Retry-After) above that, beside a fixed limit set at the first C, in the same run.

    python -m benchmarks.adaptive_limit [--capacities 5,20,50] [--settle 30] [--hold 60]
                                        [--workers 2,4] [--concurrency 4] [--rules default]
                                        [--scenarios converge,follow] [--out docs/_static]
                                        [--redis-server ...]

One redis-server (broker, results, locks); the partner (``tests.harness.partner``) in this
process; ``--workers`` prefork workers (``-c --concurrency``) whose task calls the partner and
raises ``RateLimitPaused(Retry-After)`` on a 429. A load keeps a backlog of calls waiting.
Scenarios, for each rule of ``--rules`` (the limit's ``rule``: ``default``, ``aimd``,
``gradient``): for each C, the adaptive limit (floor 1/s, ceiling 4 C, start 1/s) converging
then holding ("converge"); then C at the middle capacity, doubled after ``--settle``, halved
below the first C (to C/2) ``--settle`` later and held ``--settle`` ("follow"), for the adaptive
limit and, once, a fixed limit at the first C.
Figures: the served rate over the ``--settle`` window's last 5 s, the first second from which
3 s average 90 % of C, and the 429 share of the ``--hold`` window after it (converge); the
served share of the new C over the last 5 s before the halving, and the 429 share from 10 s after
the halving to the end, and the seconds after the halving until every 5 s window after has
under 5 % 429s (follow). A PNG a scenario (served calls and 429s a second over time) goes into
``--out``; the figures are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.engine.adaptive_rates import RULES
from tests.harness.partner import Partner

from .servers import add_server_option, server_executable

SCENARIOS = ("converge", "follow")

WORKER_MODULE = """
import urllib.error, urllib.request

import redis
from celery import Celery
from celery_redislock import RateLimitPaused, SingletonTask

app = Celery("bench_adaptive")
app.conf.update(
    broker_url={broker!r}, result_backend={backend!r}, redislock_url={locks!r},
    broker_connection_retry_on_startup=False, worker_prefetch_multiplier=4, result_expires=None,
    redislock_limits={limits!r},
)
coord = redis.Redis.from_url({coord!r})


@app.task(base=SingletonTask, name="bench_adaptive.call", rate_limits={names!r}, ignore_result=True)
def call(tag, n):
    try:
        urllib.request.urlopen({url!r} + "?n=" + tag + str(n), timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            raise RateLimitPaused(float(exc.headers["Retry-After"]))
        raise
    coord.rpush("served:" + tag, n)
"""


@dataclass
class Timeline:
    """One scenario's served calls and 429s a second, and its figures."""

    name: str
    served: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


def _never(tag: str, n: int) -> None:
    raise AssertionError("runs in the worker only")


class Run:
    """A partner, workers on one limit (``limit``: adaptive dict or fixed rate) and a load."""

    def __init__(
        self,
        server: RedisServer,
        partner: Partner,
        limit: Any,
        args: argparse.Namespace,
        workers: int,
        workdir: Path,
    ) -> None:
        self.partner = partner
        base = f"redis://127.0.0.1:{server.port}"
        urls = {"broker": f"{base}/0", "backend": f"{base}/1", "locks": f"{base}/2", "coord": f"{base}/3"}
        redis.Redis.from_url(base).flushall()
        module = WORKER_MODULE.format(**urls, limits={"partner": limit}, names=["partner"], url=partner.url)
        name = f"bench_adaptive_{time.monotonic_ns()}"
        (workdir / f"{name}.py").write_text(textwrap.dedent(module))
        self.workers = [
            WorkerProcess(
                workdir, name, ["-P", "prefork", "-c", str(args.concurrency), "-n", f"w{i}-{name}@bench"]
            )
            for i in range(workers)
        ]
        for worker in self.workers:
            worker.wait_ready()
        self.app = Celery("bench_adaptive_caller", set_as_current=False)
        self.app.conf.update(
            broker_url=urls["broker"], result_backend=urls["backend"], redislock_url=urls["locks"]
        )
        self.send = self.app.task(
            base=SingletonTask,
            name="bench_adaptive.call",
            rate_limits=["partner"],
            shared=False,
            ignore_result=True,
        )(_never)
        self.coord = redis.Redis.from_url(urls["coord"])
        self.sent = 0

    def stop(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.coord.close()

    def keep_busy(self, seconds: float, backlog: int, on_second: Callable[[int], None] | None = None) -> None:
        """Keep ``backlog`` calls waiting for ``seconds`` (``on_second(i)`` at each second)."""
        start = time.monotonic()
        second = -1
        while time.monotonic() - start < seconds:
            now = int(time.monotonic() - start)
            if now != second:
                second = now
                if on_second is not None:
                    on_second(second)
            wanted = self.coord.llen("served:b") + backlog
            for n in range(self.sent, wanted):
                self.send.delay("b", n)
            self.sent = max(self.sent, wanted)
            poll(lambda: False, 0.05, 0.05)  # the load is topped up 20 times a second


def timeline(
    partner: Partner, name: str, start: float, end: float, capacity: Callable[[float], float]
) -> Timeline:
    line = Timeline(name)
    at = start
    while at + 1 <= end:
        ok, refused = partner.served(at, at + 1)
        line.served.append(ok)
        line.refused.append(refused)
        line.capacity.append(capacity(at - start))
        at += 1
    return line


def share(values: list[int], others: list[int]) -> float:
    return sum(values) / max(1, sum(values) + sum(others))


def reached_after(line: Timeline, start: int, target: float) -> float:
    """The first second from ``start`` from which 3 s average ``target`` calls a second (inf: never)."""
    for at in range(start, len(line.served) - 2):
        if sum(line.served[at : at + 3]) / 3 >= target:
            return float(at - start)
    return float("inf")


def calm_after(line: Timeline, start: int, bound: float = 0.05) -> float:
    """Seconds from ``start`` until every 5 s window after it has under ``bound`` 429s (inf: never)."""
    calm = float("inf")
    for at in range(len(line.served) - 5, start - 1, -1):
        if share(line.refused[at : at + 5], line.served[at : at + 5]) >= bound:
            break
        calm = float(at - start)
    return calm


def adaptive(capacity: float, rule: str) -> dict[str, Any]:
    """The adaptive limit of the scenarios: floor 1/s, ceiling 4 C, start 1/s."""
    limit: dict[str, Any] = {"floor": 1, "ceiling": 4 * capacity, "start": 1}
    if rule != "default":
        limit["rule"] = rule
    return limit


def converge(
    server: RedisServer, capacity: float, rule: str, args: argparse.Namespace, workers: int, workdir: Path
) -> Timeline:
    with Partner(capacity=capacity) as partner:
        run = Run(server, partner, adaptive(capacity, rule), args, workers, workdir)
        try:
            begin = partner.now()
            run.keep_busy(args.settle + args.hold, backlog=max(20, int(capacity * 2)))
            line = timeline(
                partner,
                f"converge {rule}, C={capacity:g}/s, {workers} workers",
                begin,
                partner.now(),
                lambda _: capacity,
            )
        finally:
            run.stop()
    settled = line.served[int(args.settle) - 5 : int(args.settle)]
    held = slice(int(args.settle), None)
    line.figures = {
        "reached": sum(settled) / max(1, len(settled)) / capacity,
        "90 % of C after (s)": reached_after(line, 0, 0.9 * capacity),
        "429 share": share(line.refused[held], line.served[held]),
    }
    return line


def follow(
    server: RedisServer,
    first: float,
    limit: Any,
    label: str,
    args: argparse.Namespace,
    workers: int,
    workdir: Path,
) -> Timeline:
    """C at ``first``, doubled after ``settle``, halved below the first (to ``first`` / 2)
    ``settle`` later, held ``settle`` after."""
    phases = (args.settle, 2 * args.settle, 3 * args.settle)

    def capacity_at(at: float) -> float:
        return first if at < phases[0] else 2 * first if at < phases[1] else first / 2

    with Partner(capacity=first) as partner:
        run = Run(server, partner, limit, args, workers, workdir)
        try:
            begin = partner.now()

            def each_second(second: int) -> None:
                partner.capacity = capacity_at(second)

            run.keep_busy(phases[2], backlog=max(20, int(first * 4)), on_second=each_second)
            line = timeline(
                partner,
                f"follow {label}, C={first:g}/s doubled then halved to {first / 2:g}/s",
                begin,
                partner.now(),
                capacity_at,
            )
        finally:
            run.stop()
    doubled = line.served[int(phases[1]) - 5 : int(phases[1])]
    halved = int(phases[1])
    after_halving = slice(halved + 10, None)
    line.figures = {
        "doubled reached": sum(doubled) / max(1, len(doubled)) / (2 * first),
        "90 % of 2 C after (s)": reached_after(line, int(phases[0]), 0.9 * 2 * first),
        "429 share from 10 s after halving": share(line.refused[after_halving], line.served[after_halving]),
        "429s under 5 % after halving (s)": calm_after(line, halved),
    }
    return line


def plot(line: Timeline, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3))
    seconds = range(len(line.served))
    axes.plot(seconds, line.capacity, "k--", label="partner capacity C")
    axes.plot(seconds, line.served, label="served / s")
    axes.plot(seconds, line.refused, label="429 / s")
    axes.set_xlabel("seconds")
    axes.set_ylabel("calls a second")
    axes.set_title(line.name, fontsize=9)
    axes.legend(fontsize=7)
    figure.tight_layout()
    slug = "".join(ch if ch.isalnum() else "-" for ch in line.name.lower()).strip("-")
    path = out / f"adaptive-{'-'.join(filter(None, slug.split('-')))}.png"
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def run(args: argparse.Namespace) -> list[Timeline]:
    lines = []
    with RedisServer(server_executable(args.redis_server)) as server, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for workers in args.workers:
            first = args.capacities[len(args.capacities) // 2]
            for rule in args.rules:
                if "converge" in args.scenarios:
                    for capacity in args.capacities:
                        lines.append(converge(server, capacity, rule, args, workers, workdir))
                if "follow" in args.scenarios:
                    label = f"adaptive {rule}, {workers} workers"
                    lines.append(follow(server, first, adaptive(first, rule), label, args, workers, workdir))
            if "follow" in args.scenarios and args.fixed:
                label = f"fixed {first:g}/s, {workers} workers"
                lines.append(follow(server, first, f"{first:g}/s", label, args, workers, workdir))
    return lines


def report(lines: list[Timeline], plots: list[Path]) -> str:
    rows = ["| Scenario | Figure | Value |", "| --- | --- | --- |"]
    for line in lines:
        for name, value in line.figures.items():
            shown = f"{value:g}" if "(s)" in name else f"{value:.0%}"
            rows.append(f"| {line.name} | {name} | {shown} |")
    rows.append("")
    rows += [f"Plot: {path.name}" for path in plots]
    return "\n".join(rows)


def _numbers(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(each) for each in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None
        if not values or any(value <= 0 for value in values):
            raise argparse.ArgumentTypeError(f"must be numbers > 0, got {text!r}")
        return values

    return parse


def _names(known: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [each.strip() for each in text.split(",")]
        wrong = [each for each in values if each not in known]
        if wrong:
            raise argparse.ArgumentTypeError(f"must be of {', '.join(known)}, got {wrong[0]!r}")
        return values

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adaptive_limit", description=__doc__)
    parser.add_argument(
        "--capacities",
        type=_numbers(float),
        default=[5.0, 20.0, 50.0],
        help="the partner's C, calls a second",
    )
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds to converge (and between C's changes)"
    )
    parser.add_argument("--hold", type=float, default=60.0, help="seconds measured after converging")
    parser.add_argument(
        "--workers", type=_numbers(int), default=[2, 4], help="numbers of workers sharing the limit"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="each worker's -c")
    parser.add_argument(
        "--rules",
        type=_names(RULES),
        default=["default"],
        help=f"the adaptive limit's rules to run, of {', '.join(RULES)}",
    )
    parser.add_argument(
        "--scenarios", type=_names(SCENARIOS), default=list(SCENARIOS), help="converge, follow"
    )
    parser.add_argument(
        "--no-fixed", dest="fixed", action="store_false", help="no fixed limit beside the follow scenario"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/_static"), help="where the PNG plots go")
    add_server_option(parser)
    args = parser.parse_args(argv)
    if args.settle < 6:
        parser.error(f"--settle must be at least 6 seconds (its last 5 are measured), got {args.settle:g}")
    lines = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    plots = [plot(line, args.out) for line in lines]
    print(report(lines, plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
