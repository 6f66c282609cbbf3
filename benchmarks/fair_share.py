"""Fair share per tenant: how long tenant B's calls wait behind tenant A's backlog, with a plain
Celery task and with ``fair_key``, and what fair share costs the worker's throughput.

    python -m benchmarks.fair_share [--n 5000] [--b-calls 10] [--repeats 5] [--concurrency 2]
                                    [--body-ms 0] [--lanes 16] [--broker redis|rabbitmq]
                                    [--redis-server ...]
                                    [--variants plain,fair] [--out DIR]

Servers on free loopback ports: the broker (a redis-server, or with ``--broker rabbitmq`` a
RabbitMQ node), results and a coordination database on one redis-server, the lock Redis alone on
another. Each run of a variant: tenant A's ``--n`` calls are queued while no worker runs; a
prefork worker (``--concurrency`` processes) starts; once it has started a few of A's calls,
tenant B sends ``--b-calls``. Each body first records its tenant, the time its call was
published (the sender's clock) and its own start (the worker's clock: one host, one clock).
Reported, per variant: B's wait (publish to start) p50 and p99 over every run's calls, how many
of A's calls started while a call of B waited (its wait in calls, which no load on the machine
moves), and the drain rate (starts per second from B's first publish to the
last start, the sender idle), its ratio to plain's paired per run; fair's over the lock's alone (a ``SingletonTask``
without ``fair_key``) is what fair share adds to the lock. Variants alternate, in an order shuffled per
run, so a slow stretch of the machine hits both. The chart draws each tenant's starts over time
in one run of each variant.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery, Task

from celery_redislock import OptionError, SingletonTask
from celery_redislock.config.options import option_names
from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from tests.harness import RabbitMQServer

from .harness import machine, run_seconds, shuffled
from .servers import add_server_option, server_executable

DEFAULT_OUT = Path(__file__).parent / "results" / "fair_share"
QUEUE = "fairbench"
#: The task of each variant, and the options of its declaration (both sides declare it alike).
#: Each variant's worker declares its own task alone, so only the fair one consumes the lanes.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "plain": ("Task", {}),
    # Plain Celery's task in a worker that also consumes the queue's lanes (a fair task declared
    # beside it, never called): what consuming 1 + fair_lanes queues costs by itself.
    "lanes": ("Task", {}),
    # The lock alone: what fair share adds to a SingletonTask is fair's rate over this one's.
    "lock": ("SingletonTask", {}),
    "fair": ("SingletonTask", {"fair_key": ["tenant"]}),
    # Fair share without the lock: what the lanes cost a task that needs no de-duplication.
    "fair-nolock": ("SingletonTask", {"fair_key": ["tenant"], "lock": False}),
}


def ident(variant: str) -> str:
    """``variant`` as a Python name (its task function's, its worker module's)."""
    return variant.replace("-", "_")


#: The worker's app module: each body records its start in the coordination database.
WORKER_MODULE = """
import time

import redis
from celery import Celery, Task

from celery_redislock import SingletonTask

app = Celery("bench_fair")
app.conf.update(
    broker_url={broker!r}, result_backend={backend!r}, redislock_url={locks!r},
    broker_connection_retry_on_startup=False, task_default_queue={queue!r},
    task_ignore_result=True, worker_prefetch_multiplier={prefetch!r},
)
coord = redis.Redis.from_url({coord!r})


def record(run, tenant, seq, sent):
    # The host's clock, which the sender's is on this one machine: read before anything else.
    started = time.time()
    coord.rpush("starts:" + run, f"{{tenant}} {{seq}} {{sent!r}} {{started!r}}")
    end = time.thread_time() + {body_s!r}
    while time.thread_time() < end:  # the body's own CPU, if any
        pass
"""

TASK_SOURCE = """

@app.task(base={base}, name="fair_bench.{variant}"{options})
def {func}(run, tenant, seq, sent):
    record(run, tenant, seq, sent)
"""

#: Declared in the ``lanes`` variant's worker only: its lanes are consumed, it is never called.
LANES_SOURCE = """

@app.task(base=SingletonTask, name="fair_bench.unused_fair", fair_key=["tenant"], fair_lanes={lanes!r})
def unused_fair(tenant):
    pass
"""


@dataclass
class Run:
    """One drain of one variant: every start as (tenant, seq, published, started), by the clock."""

    variant: str
    starts: list[tuple[str, int, float, float]]
    #: when B's first call was published
    b_first_sent: float
    #: the lock Redis's commands meanwhile, by name (INFO commandstats: a script's own inside it)
    commands: dict[str, int] = field(default_factory=dict)
    #: the worker's CPU µs per call over the drain (its main process and pool, /proc)
    cpu_us: float = float("nan")

    def of(self, tenant: str) -> list[tuple[str, int, float, float]]:
        return [start for start in self.starts if start[0] == tenant]

    @property
    def b_waits(self) -> list[float]:
        """Seconds from each B call's publish to its start."""
        return [started - sent for _, _, sent, started in self.of("B")]

    @property
    def a_ahead(self) -> list[int]:
        """For each B call, how many of A's calls started while it waited (from its publish to
        its start): its wait in calls, which no load on the machine moves."""
        a_starts = sorted(start[3] for start in self.of("A"))
        return [
            bisect.bisect_left(a_starts, started) - bisect.bisect_right(a_starts, sent)
            for _, _, sent, started in self.of("B")
        ]

    @property
    def drain_rate(self) -> float:
        """Starts per second from B's first publish to the last start: the worker busy with the
        backlog, past its start-up, the sender idle but for B's few calls."""
        times = sorted(start[3] for start in self.starts if start[3] >= self.b_first_sent)
        return (
            (len(times) - 1) / (times[-1] - times[0])
            if len(times) > 1 and times[-1] > times[0]
            else float("nan")
        )


@dataclass
class Figures:
    config: dict[str, Any]
    machine: dict[str, str]
    unavailable: dict[str, str] = field(default_factory=dict)
    #: variant -> every run, in order
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def caller(
    urls: dict[str, str], variants: list[str], args: argparse.Namespace
) -> tuple[Celery, dict[str, str]]:
    """The sending side's app with each variant's task declared as the worker declares it (its
    body never runs here), and why a variant cannot run (this version lacks or refuses its
    options: Celery sets an unknown keyword of a task declaration as an attribute, unchecked)."""
    app = Celery("bench_fair_caller", set_as_current=False)
    app.conf.update(
        broker_url=urls["broker"],
        result_backend=urls["backend"],
        redislock_url=urls["locks"],
        task_default_queue=QUEUE,
        task_ignore_result=True,
    )
    unavailable = {}
    for variant in variants:
        base, options = variant_options(variant, args)
        missing = sorted(set(options) - option_names())
        if base == "SingletonTask" and missing:
            unavailable[variant] = f"this celery_redislock has no option {', '.join(missing)}"
            continue
        try:
            declare: Any = app.task
            task = declare(
                base=SingletonTask if base == "SingletonTask" else Task,
                name=f"fair_bench.{variant}",
                shared=False,
                **options,
            )(_never)
            assert task.name  # a shared=False task is bound, and its options checked, when first used
        except (OptionError, TypeError) as exc:
            unavailable[variant] = f"{base} refuses {options}: {exc}"
    return app, unavailable


def _never(run: str, tenant: str, seq: int, sent: float) -> None:
    raise AssertionError("runs in the worker only")


def variant_options(variant: str, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The base and options of ``variant``'s task, ``--lanes`` given to a fair one."""
    base, options = VARIANTS[variant]
    if "fair_key" in options:
        options = {**options, "fair_lanes": args.lanes}
    return base, options


def worker_source(urls: dict[str, str], variant: str, args: argparse.Namespace) -> str:
    """The worker module of ``variant``: its task alone (with ``lanes``, an unused fair one)."""
    source = WORKER_MODULE.format(queue=QUEUE, prefetch=args.prefetch, body_s=args.body_ms / 1000, **urls)
    base, options = variant_options(variant, args)
    written = "".join(f", {key}={value!r}" for key, value in options.items())
    source += TASK_SOURCE.format(base=base, variant=variant, func=ident(variant), options=written)
    if variant == "lanes":
        source += LANES_SOURCE.format(lanes=args.lanes)
    return textwrap.dedent(source)


def worker_cpu(worker: WorkerProcess) -> float:
    """CPU seconds the worker's processes (its main process and its pool's) have used so far."""
    return sum(run_seconds(pid) for pid in [worker.pid, *worker.child_pids()])


class Bench:
    """The servers and the sender's app of one benchmark; a worker is started for each run."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        executable = server_executable(args.redis_server)
        self.main = RedisServer(executable, workdir=str(workdir))
        self.locks = RedisServer(executable, workdir=str(workdir))
        self.rabbitmq = (
            RabbitMQServer(workdir=str(workdir / "rabbitmq")) if args.broker == "rabbitmq" else None
        )
        self.app: Celery | None = None
        self.unavailable: dict[str, str] = {}
        self.variants: list[str] = []

    @contextlib.contextmanager
    def running(self) -> Iterator[Bench]:
        try:
            self.main.start()
            self.locks.start()
            base = f"redis://127.0.0.1:{self.main.port}"
            broker = f"{base}/0"
            if self.rabbitmq is not None:
                self.rabbitmq.start()
                broker = self.rabbitmq.add_vhost("fairbench")
            urls = {"broker": broker, "backend": f"{base}/1", "locks": self.locks.url, "coord": f"{base}/3"}
            self.app, self.unavailable = caller(urls, self.args.variants, self.args)
            self.variants = [v for v in self.args.variants if v not in self.unavailable]
            for variant in self.variants:
                (self.workdir / f"bench_fair_{ident(variant)}.py").write_text(
                    worker_source(urls, variant, self.args), encoding="utf-8"
                )
            self.coord = self.main.client(db=3)
            yield self
        finally:
            if self.app is not None:
                self.app.close()
            if self.rabbitmq is not None:
                self.rabbitmq.stop()
            self.main.stop()
            self.locks.stop()

    def drain(self, variant: str) -> Run:
        """Queue A's calls, start a worker, send B's once it runs A's, wait for every start."""
        assert self.app is not None
        args, task = self.args, self.app.tasks[f"fair_bench.{variant}"]
        run = uuid.uuid4().hex[:12]
        before = self.lock_commands()
        for seq in range(args.n):
            task.apply_async((run, "A", seq, time.time()))
        worker = WorkerProcess(
            self.workdir,
            f"bench_fair_{ident(variant)}",
            ["-P", "prefork", "-c", str(args.concurrency), "-Q", QUEUE],
        )
        try:
            worker.wait_ready(timeout=60)
            # B sends while the worker is busy with A's backlog, not while it is still starting.
            warm = min(args.n // 10, 50)
            if not poll(lambda: self.coord.llen(f"starts:{run}") >= warm, 120, 0.01):
                raise RuntimeError(f"{variant}: the worker did not start A's calls:\n{worker.log()[-3000:]}")
            cpu_before, started_before = worker_cpu(worker), self.coord.llen(f"starts:{run}")
            b_first_sent = time.time()
            for seq in range(args.b_calls):
                task.apply_async((run, "B", seq, time.time()))
            total = args.n + args.b_calls
            if not poll(lambda: self.coord.llen(f"starts:{run}") >= total, args.timeout, 0.01):
                raise RuntimeError(
                    f"{variant}: {self.coord.llen(f'starts:{run}')} of {total} calls started:\n"
                    f"{worker.log()[-3000:]}"
                )
            # The worker's CPU per call over the same stretch as the drain rate, read before its
            # shutdown: steadier than the rate where other work shares the cores.
            cpu_us = (worker_cpu(worker) - cpu_before) / (total - started_before) * 1e6
        finally:
            worker.stop()
        after = self.lock_commands()
        starts = []
        for entry in self.coord.lrange(f"starts:{run}", 0, -1):
            text = entry.decode() if isinstance(entry, bytes) else str(entry)
            tenant, number, sent, started = text.split()
            starts.append((tenant, int(number), float(sent), float(started)))
        self.coord.delete(f"starts:{run}")
        started_once = {(start[0], start[1]) for start in starts}
        if len(starts) != total or len(started_once) != total:
            raise RuntimeError(
                f"{variant}: {len(starts)} starts of {len(started_once)} distinct calls, sent {total}"
            )
        commands = {
            name: after[name] - before.get(name, 0) for name in after if after[name] > before.get(name, 0)
        }
        return Run(variant, starts, b_first_sent, commands, cpu_us)

    def lock_commands(self) -> dict[str, int]:
        """Calls so far on the lock Redis, by command (this read's own left out)."""
        client = self.locks.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
        return {name: n for name, n in calls.items() if name.split("|")[0] not in ("info", "hello", "client")}


#: The commands that run a script (the lock's and fair share's scripts are EVALSHA calls).
SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
#: Points of a tenant's starts kept for the chart (every k-th start, the last always).
TIMELINE_POINTS = 400


def timeline(run: Run, tenant: str) -> list[tuple[float, float]]:
    """``(seconds since B's first publish, share of the tenant's calls started)`` of the
    tenant's starts, thinned to ``TIMELINE_POINTS``: what the chart draws."""
    times = sorted(start[3] - run.b_first_sent for start in run.of(tenant))
    step = max(1, len(times) // TIMELINE_POINTS)
    kept = [i for i in range(len(times)) if i % step == 0 or i == len(times) - 1]
    return [(round(times[i], 4), round(100 * (i + 1) / len(times), 3)) for i in kept]


def compact(run: Run, chart: bool) -> dict[str, Any]:
    """What a run keeps in the results: its figures; with ``chart``, each tenant's timeline."""
    calls = len(run.starts)
    scripts = sum(n for name, n in run.commands.items() if name in SCRIPT_COMMANDS)
    row: dict[str, Any] = {
        "b_waits": run.b_waits,
        "a_ahead": run.a_ahead,
        "drain_rate": run.drain_rate,
        "cpu_us_per_call": run.cpu_us,
        "scripts_per_call": scripts / calls,
        "commands_per_call": sum(run.commands.values()) / calls,
    }
    if chart:
        row["timeline"] = {tenant: timeline(run, tenant) for tenant in ("A", "B")}
    return row


def measure(args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="redislock-fair-") as tmp,
        Bench(args, Path(tmp)).running() as bench,
    ):
        figures = Figures(
            config={k: v for k, v in vars(args).items() if k != "out"},
            machine=machine(server_executable(args.redis_server)),
            unavailable=bench.unavailable,
        )
        for repeat in range(args.repeats):
            for variant in shuffled(bench.variants, repeat):
                progress(f"run {repeat + 1}/{args.repeats}: {variant}, {args.n} + {args.b_calls} calls")
                run = bench.drain(variant)
                figures.runs.setdefault(variant, []).append(compact(run, chart=repeat == 0))
    return asdict(figures)


def write(figures: dict[str, Any], out: Path, command: str) -> Path:
    """``fair_share.json``, ``fair_share.md`` and its chart ``fair_share.png`` under ``out``."""
    from .fair_report import chart, markdown

    out.mkdir(parents=True, exist_ok=True)
    (out / "fair_share.json").write_text(json.dumps(figures) + "\n", encoding="utf-8")
    text = markdown(figures, command)
    if chart(figures, out / "fair_share.png"):
        text += "\n![each tenant's starts over time](fair_share.png)\n"
    table = out / "fair_share.md"
    table.write_text(text, encoding="utf-8")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fair_share", description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="tenant A's calls, queued first")
    parser.add_argument("--b-calls", type=int, default=10, help="tenant B's calls, sent during A's drain")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each variant, interleaved")
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's pool processes")
    parser.add_argument("--prefetch", type=int, default=4, help="worker_prefetch_multiplier")
    parser.add_argument("--body-ms", type=float, default=0.0, help="CPU ms each body spins")
    parser.add_argument("--lanes", type=int, default=16, help="fair_lanes of the fair tasks")
    parser.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated: plain, lanes, lock, fair, fair-nolock",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a drain may take")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where fair_share.md/.json/.png go")
    add_server_option(parser)
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"--variants: {', '.join(unknown) or 'none'} given; choose from {', '.join(VARIANTS)}")
    if args.n < 10 or args.b_calls < 1 or args.repeats < 1:
        parser.error(
            f"--n must be >= 10, --b-calls and --repeats >= 1; got {args.n}, {args.b_calls}, {args.repeats}"
        )
    command = (
        "python -m benchmarks.fair_share"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    )
    began = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {text}", file=sys.stderr, flush=True)

    table = write(measure(args, progress), args.out, command)
    print(table.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
