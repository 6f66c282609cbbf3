"""Our Python on a task's path, in one process: Celery's own tracer runs a trivial task, plain
and as a ``SingletonTask``, with the lock's two replies canned (no server: the lock client's
connections talk to a socket object that answers at once).

    python -m benchmarks.task_path [--n 5000] [--repeats 9]
    python -m benchmarks.task_path --instructions [--n 1000]
    python -m benchmarks.task_path --opcodes [--n 1000]
    ... --release delifeq   # as on a server with a conditional delete (Valkey 9, Redis 8.4)

The worker benchmark cannot see a few µs: on 2 shared cores its medians move by several
percent. This takes out the worker, the servers and the socket calls, and times the main
thread's user CPU (``RUSAGE_THREAD``) per task, plain and locked batches interleaved; the
difference is what the lock's Python costs a task, warm (in a pool child, between Celery's
own code, two to three times as much). It is the figure to judge a change to the task's path
by. Linux only (``RUSAGE_THREAD``).

``--opcodes`` counts the Python bytecodes a locked task executes in this package, by function
(``sys.settrace`` with opcode events; seconds): where the instructions go, function by
function, which neither a sampling profiler (too few samples in a few µs) nor callgrind (it
sees the interpreter's C, not the Python it runs) tells.

``--instructions`` counts instead of timing: the instructions the process executes per task
(valgrind's callgrind, which must be on PATH), plain and locked, less those of the same run
without the batch. A count does not move with the machine's load as CPU time does, so it tells
a change of 1 % apart where the timings need many runs; it is blind to what costs time
without instructions (cache misses, system calls), which the worker benchmark still judges.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import uuid
from collections import Counter
from types import FrameType
from typing import Any

import redis
from celery import Celery, Task
from celery.app.trace import build_tracer

import celery_redislock
from celery_redislock import SingletonTask
from celery_redislock.engine import LockEngine
from celery_redislock.integration.runtime import runtime_for

#: A TTL long enough that the renewal timer never fires during a run (it would try the
#: client's real connection, to no server).
LOCK_TIMEOUT = 3600


#: What a task's release is: the release script (Redis 6.2 and 7, Valkey 8), or the server's
#: own conditional delete (``DELIFEQ``: Valkey 9; Redis 8.4's ``DELEX`` costs the same here).
RELEASES = ("script", "delifeq")


class CannedSocket:
    """Stands for the socket of a connection of the lock client's pool: every key is free (a
    SET answers OK), every release deletes (it answers 1), and the server has ``DELIFEQ`` if
    ``release`` says so. redis-py packs the commands and parses the replies as on a real
    socket; only the system calls are left out (a read with nothing sent finds nothing, as
    the pool's check for unread data does)."""

    def __init__(self, release: str = "script") -> None:
        self._sent: list[bytes] = []
        self._commands = b"*1\r\n$7\r\ndelifeq\r\n" if release == "delifeq" else b"*0\r\n"

    def sendall(self, data: bytes) -> None:
        self._sent.append(bytes(data))

    def recv(self, size: int) -> bytes:
        if not self._sent:
            raise socket.timeout
        request = b"".join(self._sent)
        self._sent.clear()
        if b"\r\nSET\r\n" in request:
            return b"+OK\r\n"
        if b"\r\nCOMMAND\r\n" in request:  # which conditional delete the server has
            return self._commands
        return b":1\r\n"

    def settimeout(self, timeout: float | None) -> None:
        pass

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        pass


def canned_connection(release: str) -> type[redis.Connection]:
    """A connection class whose socket is a ``CannedSocket`` (no hand-shake: nothing to greet)."""

    class CannedConnection(redis.Connection):
        def _connect(self) -> Any:
            return CannedSocket(release)

        def on_connect(self) -> None:
            self._parser.on_connect(self)

        def on_connect_check_health(self, check_health: bool = True) -> None:
            self.on_connect()

    return CannedConnection


def make_app(release: str = "script") -> tuple[Celery, Task[Any, Any], Task[Any, Any]]:
    app = Celery("task_path", set_as_current=False)
    # Nothing connects: the broker is never used by the tracer, the results go to memory,
    # and the lock client's connections are canned.
    app.conf.update(
        broker_url="memory://",
        result_backend="cache+memory://",
        redislock_url="redis://127.0.0.1:1/0",
        redislock_options={"lock_timeout": LOCK_TIMEOUT},
    )

    def noop(i: int) -> int:
        return i

    app.task(name="task_path.plain", shared=False)(noop)
    app.task(name="task_path.locked", base=SingletonTask, shared=False)(noop)
    app.finalize()
    # The tasks themselves, as a worker builds its tracers from the registry: what app.task
    # returned before finalize() is a proxy, whose every attribute and call goes through
    # Celery's Proxy (a custom __call__'s tracer calls the task through it on every task).
    plain, locked = app.tasks["task_path.plain"], app.tasks["task_path.locked"]
    pool = redis.ConnectionPool(connection_class=canned_connection(release))
    # As the runtime makes its own: a task's calls hold one connection of the pool.
    runtime_for(app).engine = LockEngine(redis.Redis(connection_pool=pool), hold_connection=True)
    return app, plain, locked


def _request(task_id: str, i: int) -> dict[str, Any]:
    """The request of the call ``task(i)`` as a worker's pool process gets it."""
    return {
        "id": task_id,
        "hostname": "bench@host",
        "delivery_info": {"exchange": "", "routing_key": "celery", "priority": 0, "redelivered": False},
        "args": (i,),
        "kwargs": {},
        "is_eager": False,
        "retries": 0,
    }


def user_us_per_task(app: Celery, task: Task[Any, Any], n: int, first: int) -> float:
    """Trace ``n`` calls of ``task`` as a worker's pool process does; user CPU µs a call."""
    tracer = build_tracer(task.name, task, app=app, eager=False, propagate=False)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_utime
    for i in range(first, first + n):
        task_id = str(uuid.uuid4())
        outcome = tracer(task_id, [i], {}, _request(task_id, i))
        if outcome[0] != i:
            raise RuntimeError(f"{task.name} did not run: {outcome!r}")
    return (resource.getrusage(resource.RUSAGE_THREAD).ru_utime - before) / n * 1e6


#: Where this package's code lives: frames of other files are not counted by ``--opcodes``.
PACKAGE_DIR = os.path.dirname(os.path.abspath(celery_redislock.__file__))


def opcodes_per_task(app: Celery, task: Task[Any, Any], n: int) -> Counter[str]:
    """Bytecodes executed per task in this package's functions (``module:function``), over
    ``n`` traced calls of ``task``."""
    tracer = build_tracer(task.name, task, app=app, eager=False, propagate=False)
    counts: Counter[str] = Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE_DIR):
            return None  # not ours: its lines and opcodes go untraced
        frame.f_trace_opcodes = True
        if event == "opcode":
            module = os.path.relpath(code.co_filename, PACKAGE_DIR)
            counts[f"{module}:{getattr(code, 'co_qualname', code.co_name)}"] += 1
        return trace

    sys.settrace(trace)
    try:
        for i in range(n):
            task_id = str(uuid.uuid4())
            tracer(task_id, [i], {}, _request(task_id, i))
    finally:
        sys.settrace(None)
    return Counter({name: round(count / n) for name, count in counts.items()})


def print_opcodes(n: int, release: str) -> int:
    app, _, locked = make_app(release)
    user_us_per_task(app, locked, 500, 0)  # warm-up
    counts = opcodes_per_task(app, locked, n)
    print(
        f"bytecodes a task executes in celery_redislock, by function ({n} tasks, replies canned, release: {release}):"
    )
    for name, count in counts.most_common():
        if count:
            print(f"  {count:6,d}  {name}")
    print(f"  {sum(counts.values()):6,d}  all")
    return 0


def instructions(kind: str, n: int, release: str) -> int:
    """Instructions a run of this module with ``--only kind --n n`` executes (callgrind)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [
        sys.executable,
        "-m",
        "benchmarks.task_path",
        "--only",
        kind,
        "--n",
        str(n),
        "--release",
        release,
    ]
    # One hash seed: dicts and sets are laid out, and so walked, alike in every run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1))


def count_instructions(n: int, release: str) -> int:
    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    setup = instructions("none", n, release)
    plain, locked = ((instructions(kind, n, release) - setup) / n for kind in ("plain", "locked"))
    print(f"instructions per task, a batch of {n} (callgrind, replies canned, release: {release}):")
    print(f"  plain Celery task  {plain:9,.0f}")
    print(f"  SingletonTask      {locked:9,.0f}")
    print(f"  the lock's Python  {locked - plain:9,.0f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.task_path", description=__doc__)
    parser.add_argument("--n", type=int, help="tasks per batch (default 5000; 1000 with --instructions)")
    parser.add_argument("--repeats", type=int, default=9, help="batches of each, interleaved")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind)")
    parser.add_argument("--opcodes", action="store_true", help="count our bytecodes by function")
    parser.add_argument(
        "--release", choices=RELEASES, default="script", help="the server's release (default: script)"
    )
    parser.add_argument("--only", choices=("none", "plain", "locked"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.instructions:
        return count_instructions(args.n or 1000, args.release)
    if args.opcodes:
        return print_opcodes(args.n or 1000, args.release)
    args.n = args.n or 5000
    app, plain, locked = make_app(args.release)
    user_us_per_task(app, plain, 500, 0)  # warm-up: imports, plans, first allocations
    user_us_per_task(app, locked, 500, 0)
    if args.only is not None:  # one batch of one kind, counted from outside (--instructions)
        if args.only != "none":
            user_us_per_task(app, plain if args.only == "plain" else locked, args.n, 1000)
        return 0
    runs: dict[str, list[float]] = {"plain": [], "locked": []}
    first = 1000
    for _ in range(args.repeats):
        for name, task in (("plain", plain), ("locked", locked)):
            runs[name].append(user_us_per_task(app, task, args.n, first))
            first += args.n
    plain_us, locked_us = statistics.median(runs["plain"]), statistics.median(runs["locked"])
    print(f"user CPU µs per task, median of {args.repeats} batches of {args.n} (replies canned):")
    print(f"  plain Celery task  {plain_us:6.1f}")
    print(f"  SingletonTask      {locked_us:6.1f}")
    print(f"  the lock's Python  {locked_us - plain_us:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
