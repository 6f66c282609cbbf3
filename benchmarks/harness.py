"""Runs the scenarios: own redis-servers, a prefork worker, every variant interleaved per repeat."""

from __future__ import annotations

import gc
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import redis
from celery import Celery
from celery.result import EagerResult

from celery_redislock.config.arguments import digest
from celery_redislock.contrib.testing import RedisServer, WorkerProcess
from celery_redislock.engine import Lease, LockEngine
from celery_redislock.engine.holders import holder_id
from celery_redislock.engine.keys import format_key
from celery_redislock.engine.renewal import Renewer
from celery_redislock.engine.script_runner import pipelined_scripts
from celery_redislock.engine.scripts import ACQUIRE
from tests.harness import counting_client

from . import workerapp
from .servers import server_executable, server_version
from .workerapp import UNAVAILABLE, VARIANTS, make_app

T = TypeVar("T")

# Commands the harness itself sends to the lock server between measurements.
HARNESS_COMMANDS = frozenset({"info", "config", "monitor", "echo", "flushall", "slowlog", "script"})


@dataclass
class Config:
    """Sizes of one run. The defaults take about 9 minutes on 2 cores."""

    #: tasks per uncontended batch (one batch per variant per repeat)
    n: int = 300
    #: measured repeats; one more, first, is a warm-up and is not counted. Many short batches,
    #: interleaved, rather than a few long ones: the machine's load drifts over seconds, and
    #: the confidence interval of a median narrows with the number of repeats.
    repeats: int = 40
    #: tasks in the MONITOR run that counts round trips
    trips_n: int = 200
    #: tasks per duplicate-heavy batch, over 10 distinct arguments
    dup_n: int = 200
    dup_repeats: int = 3
    dup_sleep: float = 0.05
    renewal_sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    renewal_repeats: int = 5
    pings: int = 2000
    variants: tuple[str, ...] = tuple(VARIANTS)
    #: worker pool processes (the machine has 2 cores)
    concurrency: int = 2
    #: which redis-server runs both servers (see servers.SERVER_CHOICES, or a path)
    redis_server: str = "default"
    #: the worker app also has ``workerapp.PROBE`` (``benchmarks.placement``)
    probe: bool = False


@dataclass
class Results:
    config: dict[str, Any]
    machine: dict[str, str]
    unavailable: dict[str, str]
    #: scenario 5: PING round trip and one acquire+release pair, in microseconds
    floor: dict[str, float] = field(default_factory=dict)
    #: scenario 1 (+2's commandstats): variant -> figures
    uncontended: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: scenario 1b: variant -> figures of a queue drained by the worker alone
    backlog: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: scenario 2: variant -> top-level commands (round trips) and all commands per task
    trips: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: scenario 3: variant -> figures (medians; overlaps: the largest seen)
    duplicates: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: scenario 4: locks held -> figures
    renewal: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def machine(executable: str) -> dict[str, str]:
    """What the figures were measured on (``executable``: the redis-server binary)."""

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    cpu = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        cpu = next(
            line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "os": platform.platform(),
        "python": platform.python_version(),
        "celery": version("celery"),
        "kombu": version("kombu"),
        "redis-py": version("redis"),
        "server": server_version(executable),
        "celery-singleton": version("celery-singleton"),
        "celery-once": version("celery_once"),
        "date": time.strftime("%Y-%m-%d"),
    }


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far; NaN where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_seconds(pid: int) -> float:
    """CPU time a process's live threads have used so far, to the nanosecond (the scheduler's
    ``schedstat``), where ``cpu_seconds`` counts in clock ticks of 10 ms; a thread that has
    ended is not counted. ``cpu_seconds`` where the kernel keeps no schedstat."""
    total = 0
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            total += int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return cpu_seconds(pid)
    return total / 1e9


def shuffled(items: Sequence[T], repeat: int) -> list[T]:
    """``items`` in repeat ``repeat``'s order (seeded: runs are comparable), so that neither a
    position in the repeat nor the item run just before favours one of them."""
    order = list(items)
    random.Random(repeat).shuffle(order)
    return order


@dataclass
class Drained:
    """A batch queued, then drained by the worker alone (``Bench.drain``)."""

    seconds: float
    #: CPU µs per task by process, and of all of them
    cpu: dict[str, float]
    #: the lock Redis's server time per task
    server_us: float
    #: CPU µs per task by process while the batch was queued (a lock taken at send is taken
    #: then), and of all of them
    sent_cpu: dict[str, float] = field(default_factory=dict)


class Bench:
    """The servers, the worker and the driver's app of one run."""

    def __init__(self, config: Config, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.variants = [v for v in config.variants if v not in UNAVAILABLE]
        executable = server_executable(config.redis_server)
        # broker db 0, results db 1, coord db 2
        self.main = RedisServer(executable, workdir=str(workdir))
        self.locks = RedisServer(executable, workdir=str(workdir))  # every lock implementation, alone
        self.worker: WorkerProcess | None = None
        self.app: Celery | None = None
        self.node = ""  # the worker's node name, for the remote control of its consumer
        #: how a process's CPU time is read (``run_seconds`` for a finer count)
        self.cpu_clock: Callable[[int], float] = cpu_seconds

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.main.start()
        self.locks.start()
        base = f"redis://127.0.0.1:{self.main.port}"
        urls = {"broker": f"{base}/0", "results": f"{base}/1", "locks": self.locks.url, "coord": f"{base}/2"}
        source = Path(workerapp.__file__).read_text(encoding="utf-8")
        app_options: dict[str, Any] = {**urls, "probe": self.config.probe}
        call = ", ".join(f"{k}={v!r}" for k, v in app_options.items())
        (self.workdir / "benchapp.py").write_text(f"{source}\n\napp = make_app({call})\n", encoding="utf-8")
        self.worker = WorkerProcess(
            self.workdir,
            "benchapp",
            [
                "-P",
                "prefork",
                "-c",
                str(self.config.concurrency),
                "-Q",
                "bench",
                "-n",
                f"bench{self.main.port}@%h",
            ],
        )
        self.worker.wait_ready(timeout=60)
        self.node = f"bench{self.main.port}@{socket.gethostname()}"
        # Whose CPU time is counted per task, besides the driver's own (time.process_time).
        self.processes = {
            "worker_parent": [self.worker.pid],
            "worker_children": sorted(self.worker.children),
            "lock_redis": [_pid(self.locks)],
            "main_redis": [_pid(self.main)],
        }
        self.app = make_app(**app_options)
        self.coord = redis.Redis.from_url(urls["coord"])
        self.admin = self.locks.client()
        # Every top-level command logged with its server time (see _server_usec).
        self.admin.config_set("slowlog-max-len", SLOWLOG_MAX)
        self.admin.config_set("slowlog-log-slower-than", 0)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.app is not None:
            self.app.close()
        self.main.stop()
        self.locks.stop()

    def task(self, variant: str, kind: str) -> Any:
        assert self.app is not None
        return self.app.tasks[f"bench.{variant}.{kind}"]

    def order(self, repeat: int) -> list[str]:
        """The variants in repeat ``repeat``'s order (``shuffled``)."""
        return shuffled(self.variants, repeat)

    # -- scenario 5: the floor ----------------------------------------------------------------

    def floor(self) -> dict[str, float]:
        client = self.locks.client()
        engine = LockEngine(self.locks.client())
        key = format_key("redislock", "bench.floor", digest("floor"))
        holder = holder_id(str(uuid.uuid4()), "bench@floor")
        pings, pairs = [], []
        for i in range(self.config.pings + 100):  # the first 100 warm up
            t0 = time.perf_counter()
            client.ping()
            t1 = time.perf_counter()
            engine.acquire(key, holder, 30_000)
            engine.release(key, holder)  # as a task with no waiter releases
            t2 = time.perf_counter()
            if i >= 100:
                pings.append(t1 - t0)
                pairs.append(t2 - t1)
        floor = {
            "ping_us": statistics.median(pings) * 1e6,
            "acquire_release_us": statistics.median(pairs) * 1e6,
            **self._server_pairs(client, engine, key, holder),
        }
        client.close()
        engine.client.close()
        return floor

    def _server_pairs(
        self, client: redis.Redis, engine: LockEngine, key: str, holder: str
    ) -> dict[str, float]:
        """Server µs of one uncontended pair, ours (SET NX + the release a task with no waiter
        sends: the server's conditional delete, else the release script) against the peers'
        (SET NX + DEL), with nothing else running: the least disturbed server figure."""
        pairs: dict[str, Callable[[], object]] = {
            "server_pair_us": lambda: (engine.acquire(key, holder, 30_000), engine.release(key, holder)),
            "server_peer_pair_us": lambda: (client.set(key, holder, nx=True, px=30_000), client.delete(key)),
        }
        out = {}
        for name, pair in pairs.items():
            best = float("inf")
            for _ in range(3):  # the least disturbed of three runs
                self._server_usec()
                for _ in range(self.config.pings):
                    pair()
                best = min(best, self._server_usec() / self.config.pings)
            out[name] = best
        return out

    # -- scenario 1 + commandstats ------------------------------------------------------------

    def _commandstats(self) -> tuple[Counter[str], Counter[str]]:
        """Calls and server microseconds so far, by command, on the lock's Redis (the harness's
        own commands left out). A script's inner commands are counted here on their own too, and
        their time is also in the script's: for the server time of what clients sent, see
        _server_usec."""
        calls: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for name, value in self.admin.info("commandstats").items():
            command = name.removeprefix("cmdstat_")
            if command.split("|")[0] not in HARNESS_COMMANDS:
                calls[command] = int(value["calls"])
                usec[command] = int(value["usec"])
        return calls, usec

    def _server_usec(self) -> float:
        """Server microseconds of the commands clients sent since the last call, from SLOWLOG
        (on with a threshold of 0 on the lock's Redis: it logs each top-level command with its
        duration, a script as one entry including its inner commands), then reset."""
        entries = self.admin.slowlog_get(SLOWLOG_MAX)
        self.admin.slowlog_reset()
        if len(entries) >= SLOWLOG_MAX:
            raise RuntimeError(f"more than {SLOWLOG_MAX} commands in one batch: the slowlog dropped some")
        return float(
            sum(
                int(entry["duration"])
                for entry in entries
                if _command_name(entry["command"]) not in HARNESS_COMMANDS
            )
        )

    def _cpu(self) -> dict[str, float]:
        cpu = {name: sum(map(self.cpu_clock, pids)) for name, pids in self.processes.items()}
        cpu["driver"] = time.process_time()
        return cpu

    def _run_batch(
        self, variant: str, kind: str, calls: Sequence[tuple[Any, ...]]
    ) -> tuple[float, list[Any]]:
        """Send ``calls`` and wait for every task sent; returns (seconds, the results)."""
        task = self.task(variant, kind)
        gc.collect()  # the previous batch's garbage is not this one's to collect
        start = time.perf_counter()
        results = [task.apply_async(args) for args in calls]
        sent = {r.id: r for r in results if not isinstance(r, EagerResult)}
        for result in sent.values():  # each get() drains the backend's pub/sub: no polling
            result.get(timeout=300, propagate=False, disable_sync_subtasks=False)
        return time.perf_counter() - start, results

    def uncontended(self) -> dict[str, dict[str, Any]]:
        config = self.config
        rates: dict[str, list[float]] = {v: [] for v in self.variants}
        commands: dict[str, Counter[str]] = {v: Counter() for v in self.variants}
        usecs: dict[str, Counter[str]] = {v: Counter() for v in self.variants}
        server_us: dict[str, list[float]] = {v: [] for v in self.variants}
        cpu: dict[str, list[dict[str, float]]] = {v: [] for v in self.variants}
        counter = 0
        for repeat in range(config.repeats + 1):  # repeat 0 warms up
            for variant in self.order(repeat):
                calls = [(counter + i,) for i in range(config.n)]
                counter += config.n
                self._server_usec()
                (before, usec_before), cpu_before = self._commandstats(), self._cpu()
                seconds, results = self._run_batch(variant, "noop", calls)
                (after, usec_after), cpu_after = self._commandstats(), self._cpu()
                server = self._server_usec()
                values = [r.result for r in results]
                if values != [c[0] for c in calls]:
                    bad = next(v for v, c in zip(values, calls) if v != c[0])
                    raise RuntimeError(f"{variant}: an uncontended task did not run: {bad!r}")
                if repeat:
                    rates[variant].append(config.n / seconds)
                    commands[variant].update(after - before)
                    usecs[variant].update(usec_after - usec_before)
                    server_us[variant].append(server / config.n)
                    cpu[variant].append(_cpu_row(cpu_before, cpu_after, config.n))
        out = {}
        for variant in self.variants:
            total = config.n * config.repeats
            out[variant] = {
                **_throughput(variant, rates, cpu, server_us),
                "usec_per_call": {
                    name: usecs[variant][name] / calls
                    for name, calls in sorted(commands[variant].items())
                    if calls
                },
                "commands_per_task": sum(commands[variant].values()) / total,
                "commands": {name: calls / total for name, calls in sorted(commands[variant].items())},
            }
        return out

    # -- scenario 1b: a backlog drained ------------------------------------------------------

    def backlog(self) -> dict[str, dict[str, Any]]:
        """The worker's own throughput: ``n`` calls queued while it consumes nothing, then the
        time it takes to run them all, with the sender idle. Scenario 1's tasks/s also depends
        on how the sender and the worker share the 2 cores (a sender slowed by a lock taken in
        ``apply_async`` leaves the worker more of them); here nobody else runs. A lock taken
        at send (the peers', ``lock_on="enqueue"``) is taken while the queue fills, untimed:
        the worker pays only what it does itself."""
        config = self.config
        rates: dict[str, list[float]] = {v: [] for v in self.variants}
        cpu: dict[str, list[dict[str, float]]] = {v: [] for v in self.variants}
        server_us: dict[str, list[float]] = {v: [] for v in self.variants}
        counter = 2 * 10**9  # arguments no other scenario uses
        for repeat in range(config.repeats + 1):  # repeat 0 warms up
            for variant in self.order(repeat):
                calls = [(counter + i,) for i in range(config.n)]
                counter += config.n
                drained = self.drain(self.task(variant, "noop"), calls)
                if repeat:
                    rates[variant].append(config.n / drained.seconds)
                    # The whole call too, queued and run: the peers lock as it is queued.
                    sending = drained.sent_cpu["all"]
                    cpu[variant].append(
                        {**drained.cpu, "sending": sending, "whole": drained.cpu["all"] + sending}
                    )
                    server_us[variant].append(drained.server_us)
        out = {}
        for variant in self.variants:
            out[variant] = _throughput(variant, rates, cpu, server_us)
        return out

    def drain(self, task: Any, calls: Sequence[tuple[Any, ...]], **options: Any) -> Drained:
        """Queue ``calls`` of ``task`` (sent with ``options``) while the worker consumes
        nothing, then time the worker draining them, the sender idle. Checks, untimed, that
        every call ran and returned its first argument (a ``noop``)."""
        self._consume(False)
        sent_before = self._cpu()
        results = [task.apply_async(args, **options) for args in calls]
        sent_after = self._cpu()
        gc.collect()
        self._server_usec()
        cpu_before = self._cpu()
        start = time.perf_counter()
        self._consume(True)
        self._wait_stored([r.id for r in results])
        seconds = time.perf_counter() - start
        cpu_after = self._cpu()
        server = self._server_usec()
        values = [r.get(timeout=60, propagate=False) for r in results]  # untimed
        if values != [c[0] for c in calls]:
            raise RuntimeError(f"{task.name}: a queued task did not run")
        n = len(calls)
        sent = _cpu_row(sent_before, sent_after, n)
        return Drained(seconds, _cpu_row(cpu_before, cpu_after, n), server / n, sent)

    def _consume(self, on: bool) -> None:
        """Make the worker consume the bench queue, or stop (it replies once it has)."""
        assert self.app is not None
        control = self.app.control
        change = control.add_consumer if on else control.cancel_consumer
        replies = change("bench", destination=[self.node], reply=True, timeout=10)
        if not replies:
            raise RuntimeError(f"the worker {self.node} did not answer {change.__name__}")

    def _wait_stored(self, task_ids: Sequence[str], timeout: float = 300) -> None:
        """Poll (every 2 ms, a few cheap commands) until every task's result is stored: the
        queue's length until it is empty, then the results of the last tasks still running.
        Not result.get(): the driver would compete for the CPU, reading each result as it
        comes."""
        assert self.app is not None
        backend: Any = self.app.backend  # a RedisBackend (make_app): its keys and its client
        broker = redis.Redis.from_url(self.app.conf.broker_url)
        pending = [backend.get_key_for_task(task_id) for task_id in task_ids]
        deadline = time.monotonic() + timeout
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{len(pending)} queued tasks not done after {timeout}s")
                if not broker.llen("bench"):
                    stored = backend.client.mget(pending)
                    pending = [key for key, value in zip(pending, stored) if value is None]
                if pending:
                    time.sleep(0.002)
        finally:
            broker.close()

    # -- scenario 2: round trips --------------------------------------------------------------

    def trips(self) -> dict[str, dict[str, Any]]:
        out = {}
        for variant in self.variants:
            calls = [(10**9 + i,) for i in range(self.config.trips_n)]
            with monitor(self.locks) as seen:
                self._run_batch(variant, "noop", calls)
            top = Counter({k: v for k, v in seen["client"].items() if k.lower() not in HARNESS_COMMANDS})
            n = self.config.trips_n
            out[variant] = {
                "round_trips_per_task": sum(top.values()) / n,
                "commands_per_task": (sum(top.values()) + sum(seen["lua"].values())) / n,
                "round_trips": {k: v / n for k, v in sorted(top.items())},
                "in_scripts": {k: v / n for k, v in sorted(seen["lua"].items())},
            }
        return out

    # -- scenario 3: duplicates ---------------------------------------------------------------

    def duplicates(self) -> dict[str, dict[str, Any]]:
        config = self.config
        runs: dict[str, list[dict[str, float]]] = {v: [] for v in self.variants}
        for repeat in range(config.dup_repeats):
            # The same sequence of keys for every variant in a repeat.
            rng = random.Random(repeat)
            keys = [f"k{rng.randrange(10)}" for _ in range(config.dup_n)]
            for variant in self.order(repeat):
                tag = f"{repeat}-{uuid.uuid4().hex[:8]}"
                seconds, results = self._run_batch(
                    variant, "sleep", [(tag, key, config.dup_sleep) for key in keys]
                )
                sent = len({r.id for r in results if not isinstance(r, EagerResult)})
                ran = int(self.coord.get(f"bench:ran:{variant}:{tag}") or 0)
                overlaps = int(self.coord.get(f"bench:overlaps:{variant}:{tag}") or 0)
                runs[variant].append(
                    {
                        "sent": sent,
                        "ran": ran,
                        "skipped": config.dup_n - ran,
                        "overlaps": overlaps,
                        "seconds": seconds,
                    }
                )
        out: dict[str, dict[str, Any]] = {}
        for variant, rows in runs.items():
            out[variant] = {name: statistics.median(row[name] for row in rows) for name in rows[0]}
            out[variant]["overlaps_max"] = max(row["overlaps"] for row in rows)
            out[variant]["runs"] = rows
        return out

    # -- scenario 4: renewal at scale ---------------------------------------------------------

    def renewal(self) -> dict[str, dict[str, float]]:
        out = {}
        client, trips = counting_client(self.locks.url)
        engine = LockEngine(client)
        for size in self.config.renewal_sizes:
            self.admin.flushall()
            self.admin.slowlog_reset()  # its entries take memory too: not the locks'
            memory_before = int(self.admin.info("memory")["used_memory"])
            task_id = str(uuid.uuid4())
            leases = [
                Lease(
                    format_key("redislock", "bench.renewal", digest(str(i))),
                    holder_id(task_id, "bench@host"),
                    60_000,
                )
                for i in range(size)
            ]
            _take(engine, leases)
            self.admin.slowlog_reset()
            memory_after = int(self.admin.info("memory")["used_memory"])
            renewer = Renewer()
            for lease in leases:
                renewer.add(engine, lease, 3600.0)  # the timer thread never fires: cycles run here
            walls, usecs, round_trips, longest = [], [], [], []
            try:
                for cycle in range(self.config.renewal_repeats + 1):  # cycle 0 warms up
                    self.admin.config_resetstat()
                    self.admin.slowlog_reset()
                    trips.count = 0
                    t0 = time.perf_counter()
                    report = renewer.renew_now()
                    wall = time.perf_counter() - t0
                    if len(report.renewed) != size:
                        raise RuntimeError(f"renewed {len(report.renewed)} of {size} locks: {report}")
                    stats = self.admin.info("commandstats")
                    calls = [
                        int(entry["duration"])
                        for entry in self.admin.slowlog_get(SLOWLOG_MAX)
                        if _command_name(entry["command"]) not in HARNESS_COMMANDS
                    ]
                    if cycle:
                        # How long Redis served nobody else: its longest single command.
                        longest.append(max(calls, default=0) / 1000)
                        walls.append(wall)
                        round_trips.append(trips.count)
                        usecs.append(
                            sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_eval"))
                        )
            finally:
                renewer.stop()
            out[str(size)] = {
                "locks": size,
                "round_trips": statistics.median(round_trips),
                "server_ms": statistics.median(usecs) / 1000,
                "longest_call_ms": max(longest),
                "wall_ms": statistics.median(walls) * 1000,
                "bytes_per_lock": (memory_after - memory_before) / size,
            }
        self.admin.flushall()
        client.close()
        return out


#: Slowlog entries kept: more than any batch's commands.
SLOWLOG_MAX = 100_000


def _command_name(command: bytes | str) -> str:
    text = command.decode("utf-8", "replace") if isinstance(command, bytes) else command
    return text.split(" ", 1)[0].lower()


def _paired_ratio(values: Sequence[float], plain: Sequence[float] | None) -> float:
    """Median of ``values[i] / plain[i]``: NaN without a plain run to compare with."""
    if not plain:
        return float("nan")
    return statistics.median(value / base for value, base in zip(values, plain))


def _throughput(
    variant: str,
    rates: dict[str, list[float]],
    cpu: dict[str, list[dict[str, float]]],
    server_us: dict[str, list[float]],
) -> dict[str, Any]:
    """A variant's figures of a throughput scenario, from its repeats."""
    return {
        "tasks_per_s": statistics.median(rates[variant]),
        "runs": rates[variant],
        # Paired: each repeat's rate over plain's in that same repeat, so that a slow
        # stretch of the machine hits both sides of every ratio.
        "ratio": _paired_ratio(rates[variant], rates.get("plain")),
        "ratio_ci": _paired_ci(rates[variant], rates.get("plain")),
        "cpu_ratio": _cpu_ratio(cpu[variant], cpu.get("plain")),
        "cpu_us_per_task": _mean_cpu(cpu[variant]),
        # Server time of what clients sent (SLOWLOG): a script's inner commands inside it.
        "server_us_per_task": statistics.median(server_us[variant]),
    }


def _cpu_row(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    """CPU µs per task of each process over a batch of ``n``, and of all of them."""
    used = {k: (after[k] - before[k]) / n * 1e6 for k in after}
    return {**used, "all": sum(used.values())}


def _mean_cpu(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """CPU µs per task by process, over every repeat: /proc counts in clock ticks (10 ms), a
    step of 33 µs per task in a batch of 300, so one batch's figure is coarse; the mean over
    all of them is not."""
    return {k: statistics.fmean(row[k] for row in rows) for k in rows[0]}


def _cpu_ratio(rows: Sequence[dict[str, float]], plain: Sequence[dict[str, float]] | None) -> float:
    """Plain's CPU per task over the variant's, all processes, over every repeat."""
    if not plain:
        return float("nan")
    return _mean_cpu(plain)["all"] / _mean_cpu(rows)["all"]


def _paired_ci(values: Sequence[float], plain: Sequence[float] | None) -> tuple[float, float]:
    """A 95 % confidence interval of the median of ``values[i] / plain[i]`` (bootstrap: the
    median of 2 000 resamples of the repeats, seeded, so a run's report is reproducible from
    its figures). On a shared 2-core machine one repeat's ratio moves by 10 % or more; this
    says how far the median can be trusted. NaN without plain, or with fewer than 2 repeats."""
    if not plain or len(values) < 2:
        return float("nan"), float("nan")
    ratios = [value / base for value, base in zip(values, plain)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return medians[50], medians[1949]


def _pid(server: RedisServer) -> int:
    assert server.process is not None, "the server is not running"
    return server.process.pid


def _take(engine: LockEngine, leases: Sequence[Lease], chunk: int = 1000) -> None:
    """Acquire every lease with the engine's own script, pipelined (set-up, not measured)."""
    assert isinstance(engine.client, redis.Redis)
    for start in range(0, len(leases), chunk):
        calls = [
            ((lease.key,), (lease.holder, str(lease.ttl_ms), "", ""))
            for lease in leases[start : start + chunk]
        ]
        if not all(reply == 1 for reply in pipelined_scripts(engine.client, ACQUIRE, calls)):
            raise RuntimeError("a renewal benchmark lock was already taken")


@contextmanager
def monitor(server: RedisServer) -> Iterator[dict[str, Counter[str]]]:
    """Count the commands ``server`` runs meanwhile: ``client`` (sent by clients: one round trip
    each) and ``lua`` (run by scripts), by command name, from MONITOR."""
    seen: dict[str, Counter[str]] = {"client": Counter(), "lua": Counter()}
    marker = uuid.uuid4().hex
    ready = threading.Event()
    # No read timeout (redis-py's default is 5 s): a slow machine can leave the lock's Redis
    # without a command for that long (a variant that locks nothing), and the feed must live
    # until the end marker.
    connection = server.client(socket_timeout=None)

    def listen() -> None:
        with connection.monitor() as feed:  # type: ignore[no-untyped-call]
            for line in feed.listen():
                words = line["command"].split()
                if words[:1] == ["ECHO"] and words[1:] == [f"start-{marker}"]:
                    ready.set()
                    continue
                if words[:1] == ["ECHO"] and words[1:] == [f"end-{marker}"]:
                    return
                if ready.is_set() and words:
                    seen["lua" if line["client_type"] == "lua" else "client"][words[0].upper()] += 1

    thread = threading.Thread(target=listen, name="bench-monitor", daemon=True)
    thread.start()
    probe = server.client()
    deadline = time.monotonic() + 10
    while not ready.wait(0.05):  # MONITOR starts asynchronously: echo until it has seen one
        if time.monotonic() > deadline:
            raise RuntimeError("MONITOR did not start")
        probe.echo(f"start-{marker}")
    try:
        yield seen
    finally:
        probe.echo(f"end-{marker}")
        thread.join(10)
        probe.close()
        connection.close()


def run(config: Config, progress: Any = None) -> Results:
    """Run every scenario; ``progress(text)`` is told what runs."""
    say = progress or (lambda text: None)
    results = Results(
        config=asdict(config),
        machine=machine(server_executable(config.redis_server)),
        unavailable=dict(UNAVAILABLE),
    )
    with tempfile.TemporaryDirectory(prefix="redislock-bench-") as workdir:
        bench = Bench(config, Path(workdir))
        try:
            say("starting redis-servers and a prefork worker")
            bench.start()
            say("5. the floor: PING round trip")
            results.floor = bench.floor()
            say(f"1. uncontended throughput: {config.n} tasks x {config.repeats} (+1 warm-up) per variant")
            results.uncontended = bench.uncontended()
            say(
                f"1b. a backlog of {config.n} tasks drained by the worker alone x {config.repeats} (+1 warm-up)"
            )
            results.backlog = bench.backlog()
            say(f"2. round trips per task (MONITOR, {config.trips_n} tasks per variant)")
            results.trips = bench.trips()
            say(f"3. duplicate-heavy: {config.dup_n} tasks over 10 arguments x {config.dup_repeats}")
            results.duplicates = bench.duplicates()
            say(f"4. renewal at scale: {', '.join(map(str, config.renewal_sizes))} locks held")
            results.renewal = bench.renewal()
        except BaseException:
            if bench.worker is not None:
                sys.stderr.write(bench.worker.log()[-3000:])
            raise
        finally:
            bench.stop()
    return results
