"""Where a prefork worker child's CPU goes per task: py-spy samples, split by what they ran.

    python -m benchmarks.profile_worker [--variant redislock] [--n 3000] [--redis-server default]

Starts the benchmark's own servers and prefork worker (``harness.Bench``), warms the variant
up, then runs ``n`` uncontended tasks twice: once unobserved, for the children's CPU time
(user and system, from /proc) and the lock Redis's server time (SLOWLOG, per command); once
under ``py-spy record`` attached to each child, for the split. A sample is put in one bucket,
chosen by its stack: below one of our frames, by the innermost of our functions (or the
socket call, the kernel's share, or redis-py's command path); elsewhere, Celery's own work
(or its own socket calls). Each bucket's share of the samples times the children's CPU per
task gives microseconds per task. py-spy needs ``pip install py-spy`` and ptrace rights.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .harness import HARNESS_COMMANDS, Bench, Config, cpu_seconds
from .servers import add_server_option, server_executable, server_version

#: Buckets, in the order they are printed. "ours" buckets are what the lock costs in Python.
BUCKETS = (
    ("ours: key (signature binding)", "binding"),
    ("ours: key (canonical form + digest)", "digest"),
    ("ours: plan / runtime lookup", "plan"),
    ("ours: holder id", "holder"),
    ("ours: counters", "counters"),
    ("ours: renewal bookkeeping", "renewal"),
    ("ours: engine (building the call, reading the reply)", "engine"),
    ("ours: task glue (SingletonTask)", "task"),
    ("redis-py command path (lock calls)", "redis-py"),
    ("socket calls, lock (running or waiting)", "socket"),
    ("Celery, kombu, billiard (not the lock)", "celery"),
    ("socket calls, Celery's (running or waiting)", "celery-socket"),
    ("renewal thread (running or waiting)", "renewal-thread"),
)

#: Buckets whose samples may be a thread waiting, not running.
_WAITING = frozenset({"socket", "celery-socket", "renewal-thread"})

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")

# Our functions, by module, to bucket (the innermost of ours in a stack decides).
_OURS = {
    "keys.py": "digest",
    "runtime.py": "plan",
    "holders.py": "holder",
    "stats.py": "counters",
    "renewal.py": "renewal",
    "locks.py": "engine",
    "scripts.py": "engine",
    "leases.py": "engine",
    "lock.py": "engine",
    "waiting.py": "engine",
    "task.py": "task",
    "acquisition.py": "task",
    "held.py": "task",
    "outcomes.py": "task",
}


def _frame(text: str) -> tuple[str, str]:
    match = _FRAME.match(text)
    if match is None:
        return text, ""
    return match["func"], match["file"]


def _is_redis(path: str) -> bool:
    return path.startswith("redis/") or "/redis/" in path


def _is_socket_call(func: str, path: str) -> bool:
    """A leaf frame that is in a socket system call (redis-py's read or write, billiard's pipe)."""
    return (func, Path(path).name) in _SOCKET_CALLS


_SOCKET_CALLS = {
    ("SocketBuffer._read_from_socket", "socket.py"),
    ("_HiredisParser.read_from_socket", "hiredis.py"),
    ("AbstractConnection.send_packed_command", "connection.py"),
    ("Connection._recv", "connection.py"),
    ("Connection._send", "connection.py"),
}


def bucket(stack: Sequence[str]) -> str:
    """The bucket of one sample, ``stack`` outermost frame first (py-spy's raw format)."""
    frames = [_frame(text) for text in stack]
    leaf_func, leaf_path = frames[-1] if frames else ("", "")
    if any(func == "Renewer._run" for func, _ in frames):
        return "renewal-thread"
    ours = [i for i, (_, path) in enumerate(frames) if path.startswith("celery_redislock/")]
    if not ours:
        return "celery-socket" if _is_socket_call(leaf_func, leaf_path) else "celery"
    func, path = frames[ours[-1]]
    func = func.rsplit(".", 1)[-1]
    below = frames[ours[-1] + 1 :]
    if not below and _is_socket_call(func, path):
        return "socket"
    if any(_is_redis(p) for _, p in below):
        return "socket" if _is_socket_call(leaf_func, leaf_path) else "redis-py"
    if any(p.endswith("inspect.py") for _, p in below):
        return "binding"
    if func in {"holder_id", "holder_prefix", "node_name"}:
        return "holder"
    if func in {"runtime_for", "plan", "engine", "release_channel", "engine_for"}:
        return "plan"
    if func == "get_renewer":
        return "renewal"
    return _OURS.get(Path(path).name, "task")


def read_raw(path: Path) -> Counter[str]:
    """py-spy's raw (collapsed) output as samples per bucket."""
    counts: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[bucket(stack.split(";"))] += int(count)
    return counts


def child_cpu(pids: Sequence[int]) -> tuple[float, float]:
    """User and system CPU seconds the processes used so far."""
    user = system = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11]) / tick
        system += int(fields[12]) / tick
    return user, system


@dataclass
class Measured:
    """One variant's batch, unprofiled: CPU of the worker's processes and the lock Redis's time."""

    seconds: float
    child_user_us: float
    child_sys_us: float
    parent_us: float
    server_us: float
    #: context switches per task of the children's other threads (the renewal thread)
    thread_switches: float
    #: command -> (calls per task, server µs per call), from INFO commandstats
    commands: dict[str, tuple[float, float]]

    @property
    def child_us(self) -> float:
        return self.child_user_us + self.child_sys_us


def thread_switches(pids: Sequence[int]) -> int:
    """Context switches so far of the processes' threads other than their main one (in a pool
    child: the renewal thread): a thread woken per task shows here, not in py-spy, which
    cannot tell a thread waiting on a lock from one running."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            if task.name == str(pid):
                continue
            status = (task / "status").read_text()
            total += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
    return total


def measure(bench: Bench, variant: str, n: int, start: int) -> Measured:
    """Run ``n`` tasks of ``variant`` (after a warm-up batch), unprofiled."""
    assert bench.worker is not None
    children = sorted(bench.worker.children)
    bench._run_batch(variant, "noop", [(start - i - 1,) for i in range(min(n, 500))])  # warm-up
    bench._server_usec()
    bench.admin.config_resetstat()
    user0, sys0 = child_cpu(children)
    parent0 = cpu_seconds(bench.worker.pid)
    switches0 = thread_switches(children)
    seconds, _ = bench._run_batch(variant, "noop", [(start + i,) for i in range(n)])
    switches = (thread_switches(children) - switches0) / n
    user1, sys1 = child_cpu(children)
    parent1 = cpu_seconds(bench.worker.pid)
    server = bench._server_usec()
    commands = {
        name.removeprefix("cmdstat_"): (int(v["calls"]) / n, float(v["usec_per_call"]))
        for name, v in bench.admin.info("commandstats").items()
        if name.removeprefix("cmdstat_").split("|")[0] not in HARNESS_COMMANDS
    }
    per_task = 1e6 / n
    return Measured(
        seconds,
        (user1 - user0) * per_task,
        (sys1 - sys0) * per_task,
        (parent1 - parent0) * per_task,
        server / n,
        switches,
        commands,
    )


@contextmanager
def attached(
    pids: Sequence[int], command: Callable[[int], list[str]]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One tracer per process (``command(pid)``: py-spy, strace), attached before the body runs
    and stopped after it with SIGINT, on which both write their output; waited for."""
    tracers = [
        subprocess.Popen(command(pid), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids
    ]
    time.sleep(1.0)  # tracers attach asynchronously; the batch must not start before they have
    try:
        yield tracers
    finally:
        for tracer in tracers:
            tracer.send_signal(signal.SIGINT)
        for tracer in tracers:
            tracer.wait(30)


def sample(
    bench: Bench, variant: str, n: int, start: int, rate: int, spy: str, keep: Path | None
) -> Counter[str]:
    """Run ``n`` tasks of ``variant`` under py-spy (one per child); samples per bucket."""
    assert bench.worker is not None
    pids = sorted(bench.worker.children)
    raw = {pid: bench.workdir / f"spy-{pid}.txt" for pid in pids}

    def spy_on(pid: int) -> list[str]:
        return [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "-o", str(raw[pid])]

    with attached(pids, spy_on) as spies:
        bench._run_batch(variant, "noop", [(start + i,) for i in range(n)])
    samples: Counter[str] = Counter()
    for process, path in zip(spies, raw.values()):
        if process.returncode != 0 or not path.exists():
            raise RuntimeError(f"py-spy failed on pid {path.stem}: is ptrace allowed?")
        samples.update(read_raw(path))
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, keep / f"{variant}-{path.name}")
    return samples


def profile(variant: str, n: int, rate: int, redis_server: str, keep: Path | None = None) -> str:
    """Run it; returns the report (Markdown). ``keep``: where to copy py-spy's raw stacks."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.access(spy, os.X_OK):
        raise SystemExit("py-spy not found: pip install py-spy")
    config = Config(variants=("plain", variant), redis_server=redis_server, concurrency=2)
    with tempfile.TemporaryDirectory(prefix="redislock-profile-") as workdir:
        bench = Bench(config, Path(workdir))
        try:
            bench.start()
            plain = measure(bench, "plain", n, 10**6)
            mine = measure(bench, variant, n, 2 * 10**6)
            samples = sample(bench, variant, n, 3 * 10**6, rate, spy, keep)
        finally:
            bench.stop()
    return report(variant, n, rate, redis_server, plain, mine, samples)


def report(
    variant: str, n: int, rate: int, redis_server: str, plain: Measured, mine: Measured, samples: Counter[str]
) -> str:
    version = server_version(server_executable(redis_server))
    lines = [
        f"## `{variant}` against `plain`: {n} uncontended tasks each, prefork -c 2, {version}",
        "",
        "| | plain | " + variant + " | difference |",
        "|---|---:|---:|---:|",
    ]
    for label, attribute in (
        ("tasks/s (unprofiled; noisy on a shared machine)", None),
        ("worker children, user CPU µs/task", "child_user_us"),
        ("worker children, system (kernel) CPU µs/task", "child_sys_us"),
        ("worker children, CPU µs/task", "child_us"),
        ("worker parent, CPU µs/task", "parent_us"),
        ("lock Redis, server µs/task (SLOWLOG)", "server_us"),
        ("context switches/task of the children's other threads", "thread_switches"),
    ):
        if attribute is None:
            a, b = n / plain.seconds, n / mine.seconds
        else:
            a, b = getattr(plain, attribute), getattr(mine, attribute)
        lines.append(f"| {label} | {a:,.1f} | {b:,.1f} | {b - a:+,.1f} |")
    # Samples that are Python running: not a socket call (py-spy counts a thread blocked in
    # one as running) nor the renewal thread's wait (the same). Their shares split the
    # children's user CPU; the kernel's part is the system CPU above.
    running = sum(samples[name] for _, name in BUCKETS if name not in _WAITING) or 1
    to_us = mine.child_user_us / running
    lines += [
        "",
        f"py-spy on the {variant} children ({sum(samples.values()):,} samples at {rate} Hz). py-spy "
        "cannot tell a thread blocked in a socket read or on a lock from one running, so those "
        "rows are sample counts only; the other rows split the children's user CPU per task by "
        "their share of the running samples. The kernel's share is the system CPU above.",
        "",
        "| where | samples | µs/task |",
        "|---|---:|---:|",
    ]
    for label, name in BUCKETS:
        us = "-" if name in _WAITING else f"{samples[name] * to_us:,.1f}"
        lines.append(f"| {label} | {samples[name]:,} | {us} |")
    lines += [
        "",
        "Lock Redis, `INFO commandstats` (calls per task; µs per call, a script's including its commands):",
        "",
        "| command | calls/task | µs/call |",
        "|---|---:|---:|",
    ]
    for name, (calls, usec) in sorted(mine.commands.items()):
        lines.append(f"| {name} | {calls:.2f} | {usec:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_worker", description=__doc__)
    parser.add_argument("--variant", default="redislock", help="a variant of benchmarks/workerapp.py")
    parser.add_argument("--n", type=int, default=3000, help="tasks per measured batch")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    add_server_option(parser)
    parser.add_argument("--keep", type=Path, help="a directory to keep py-spy's raw (collapsed) stacks in")
    args = parser.parse_args(argv)
    print(profile(args.variant, args.n, args.rate, args.redis_server, args.keep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
