"""System calls a prefork worker child makes per task, by call: plain against the lock variants.

    python -m benchmarks.syscalls [--variants plain,redislock,floor] [--n 1000]

Starts the benchmark's own servers and prefork worker (``harness.Bench``), warms each variant
up, then runs ``n`` uncontended tasks under ``strace -c -f`` attached to every pool child (all
their threads: the renewal thread too). A count does not move with the machine's load, and
``task_path --instructions`` cannot see these calls (callgrind counts none), so this is how a
change to the socket path is judged. Needs ``strace`` on PATH (Debian: ``apt-get install
strace``) and ptrace rights; strace slows the children many times over, so it times nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from .harness import Bench, Config
from .profile_worker import attached
from .servers import add_server_option


def parse_summary(text: str) -> Counter[str]:
    """Calls by system call name, from the summary ``strace -c`` writes (its ``total`` row
    left out). A row is ``% time, seconds, usecs/call, calls, [errors,] syscall``."""
    calls: Counter[str] = Counter()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) not in (5, 6) or fields[-1] == "total" or not fields[3].isdigit():
            continue
        try:
            float(fields[0])
        except ValueError:  # the header row
            continue
        calls[fields[-1]] += int(fields[3])
    return calls


def count(bench: Bench, variant: str, n: int, start: int, strace: str, workdir: Path) -> Counter[str]:
    """System calls of ``n`` tasks of ``variant`` in every pool child, summed."""
    assert bench.worker is not None
    bench._run_batch(variant, "noop", [(start - i - 1,) for i in range(min(n, 500))])  # warm-up
    pids = sorted(bench.worker.children)
    outputs = {pid: workdir / f"strace-{variant}-{pid}.txt" for pid in pids}
    with attached(pids, lambda pid: [strace, "-c", "-f", "-o", str(outputs[pid]), "-p", str(pid)]):
        bench._run_batch(variant, "noop", [(start + i,) for i in range(n)])
    calls: Counter[str] = Counter()
    for path in outputs.values():
        # strace's exit status after SIGINT is not 0: its summary tells it worked.
        summary = path.read_text() if path.exists() else ""
        if "total" not in summary:
            raise RuntimeError(f"strace wrote no summary for {path.stem}: is ptrace allowed?")
        calls.update(parse_summary(summary))
    return calls


def measure(variants: list[str], n: int, redis_server: str) -> str:
    """Run it; returns the report (Markdown)."""
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("strace not found on PATH (Debian: apt-get install strace)")
    config = Config(variants=tuple(variants), redis_server=redis_server, concurrency=2)
    per_task: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory(prefix="redislock-syscalls-") as workdir:
        bench = Bench(config, Path(workdir))
        try:
            bench.start()
            for index, variant in enumerate(variants):
                per_task[variant] = count(bench, variant, n, (index + 1) * 10**6, strace, Path(workdir))
        finally:
            bench.stop()
    return report(per_task, n)


def report(per_task: dict[str, Counter[str]], n: int) -> str:
    names = sorted(
        {name for calls in per_task.values() for name in calls},
        key=lambda s: (-sum(calls[s] for calls in per_task.values()), s),
    )
    variants = list(per_task)
    lines = [
        f"System calls per task of the pool children ({n} uncontended tasks, prefork -c 2, strace -c -f):",
        "",
        "| call | " + " | ".join(variants) + " |",
        "|---|" + "---:|" * len(variants),
        "| all | " + " | ".join(f"{sum(per_task[v].values()) / n:.1f}" for v in variants) + " |",
    ]
    for name in names:
        lines.append(f"| `{name}` | " + " | ".join(f"{per_task[v][name] / n:.1f}" for v in variants) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.syscalls", description=__doc__)
    parser.add_argument(
        "--variants",
        default="plain,redislock,floor",
        help="variants of benchmarks/workerapp.py, comma-separated",
    )
    parser.add_argument("--n", type=int, default=1000, help="tasks per variant")
    add_server_option(parser)
    args = parser.parse_args(argv)
    print(measure(args.variants.split(","), args.n, args.redis_server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
