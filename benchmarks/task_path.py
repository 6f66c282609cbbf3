"""Our Python on a task's path, in one process: each call is sent (``apply_async``, to an
in-memory broker) and run by Celery's own tracer, a trivial task, plain, as a ``SingletonTask``
and as the peers' (celery-singleton's ``Singleton``, celery-once's ``QueueOnce``), with every
lock's replies canned (no server: the lock clients' connections talk to a socket object that
answers at once). Sent and run, so a lock taken at send (the peers') and one taken at run (ours)
are counted the same way.

    python -m benchmarks.task_path [--n 5000] [--repeats 9]
    python -m benchmarks.task_path --instructions [--n 1000]
    python -m benchmarks.task_path --opcodes [--n 1000]
    ... --release delifeq   # as on a server with a conditional delete (Valkey 9, Redis 8.4)

The worker benchmark cannot see a few µs: on 2 shared cores its medians move by several
percent. This takes out the worker, the servers and the socket calls, and times the main
thread's user CPU (``RUSAGE_THREAD``) per task, plain and locked batches interleaved; the
difference is what the lock's Python costs a task, warm (in a pool child, between Celery's
own code, two to three times as much). It is the figure to judge a change to the task's path
by. Linux only (``RUSAGE_THREAD``). ``--run-only``: the tracer alone, what a worker's pool
child does (the peers' share there is their release only).

``--opcodes`` counts the Python bytecodes a locked task executes in this package, by function
(``sys.settrace`` with opcode events; seconds): where the instructions go, function by
function, which neither a sampling profiler (too few samples in a few µs) nor callgrind (it
sees the interpreter's C, not the Python it runs) tells.

``--instructions`` counts instead of timing: the instructions the process executes per task
(valgrind's callgrind, which must be on PATH), for each variant, less those of the same run
without the batch. A count does not move with the machine's load as CPU time does, so it tells
a change of 1 % apart where the timings need many runs; it is blind to what costs time
without instructions (cache misses, system calls), which the worker benchmark still judges.
"""

from __future__ import annotations

import argparse
import gc
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
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis
from celery import Celery, Task
from celery.app.trace import build_tracer

import celery_redislock
from celery_redislock import SingletonTask
from celery_redislock.engine import LockEngine
from celery_redislock.gates.hold_watch import WATCH
from celery_redislock.integration.runtime import runtime_for

try:  # the bench extra installs the peers
    import celery_once.backends.redis as once_redis
    from celery_once import QueueOnce
    from celery_singleton import Singleton
    from celery_singleton.backends.redis import RedisBackend
except ImportError:  # pragma: no cover - without the bench extra: ours alone
    QueueOnce = Singleton = None

#: A TTL long enough that the renewal timer never fires during a run (it would try the
#: client's real connection, to no server).
LOCK_TIMEOUT = 3600


#: What a task's release is: the release script (Redis 6.2 and 7, Valkey 8), or the server's
#: own conditional delete (``DELIFEQ``: Valkey 9; Redis 8.4's ``DELEX`` costs the same here).
RELEASES = ("script", "delifeq")

#: The variants, by name: the plain task and our lock always; the peers where installed.
LABELS = {
    "plain": "plain Celery task",
    "locked": "SingletonTask",
    "singleton": "celery-singleton Singleton",
    "once": "celery-once QueueOnce",
}


class CannedSocket:
    """Stands for the socket of a connection of a lock client's pool: every key is free (a
    SET answers OK), every release deletes (it answers 1), no call is held, and the server has
    ``DELIFEQ`` if ``release`` says so. redis-py packs the commands and parses the replies as on a real
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
        # A write may carry more commands after its first (the call's record after the SET):
        # each after a CLIENT REPLY SKIP, which the server answers nothing, nor the next.
        more = b":1\r\n" * (request.count(b"\r\n*") - 2 * request.count(b"\r\nSKIP\r\n"))
        if b"\r\nSET\r\n" in request:
            return b"+OK\r\n" + more
        if b"\r\nCOMMAND\r\n" in request:  # which conditional delete the server has
            return self._commands + more
        if b"\r\nREPLY\r\n$2\r\nON\r\n" in request:  # whether it takes CLIENT REPLY
            return b"+OK\r\n"
        if b":holds\r\n" in request:  # the operator's holds (gates.hold_watch's HGETALL): none
            return b"*0\r\n" + more
        return b":1\r\n" + more

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


def make_app(release: str = "script", *, explain: bool = True) -> tuple[Celery, dict[str, Task[Any, Any]]]:
    """The app and its tasks by variant name (``LABELS``), every lock client's replies canned."""
    app = Celery("task_path", set_as_current=False)
    # Nothing connects: the broker is kombu's in-memory one, the results go to memory, and
    # the lock clients' connections are canned.
    app.conf.update(
        broker_url="memory://",
        result_backend="cache+memory://",
        redislock_url="redis://127.0.0.1:1/0",
        redislock_options={"lock_timeout": LOCK_TIMEOUT},
        redislock_explain=explain,  # the record of decisions (explain): on by default
        singleton_backend_url="redis://127.0.0.1:1/0",
        singleton_lock_expiry=LOCK_TIMEOUT,
        ONCE={
            "backend": "celery_once.backends.Redis",
            "settings": {"url": "redis://127.0.0.1:1/0", "default_timeout": LOCK_TIMEOUT},
        },
    )

    def noop(i: int) -> int:
        return i

    bases: dict[str, Any] = {
        "plain": None,
        "locked": SingletonTask,
        "singleton": Singleton,
        "once": QueueOnce,
    }
    for name, base in bases.items():
        if name == "plain" or base is not None:
            options = {} if base is None else {"base": base}
            app.task(name=f"task_path.{name}", shared=False, **options)(noop)  # type: ignore[no-untyped-call]
    app.finalize()
    # The tasks themselves, as a worker builds its tracers from the registry: what app.task
    # returned before finalize() is a proxy, whose every attribute and call goes through
    # Celery's Proxy (a custom __call__'s tracer calls the task through it on every task).
    tasks = {name: app.tasks[f"task_path.{name}"] for name in bases if f"task_path.{name}" in app.tasks}
    connection = canned_connection(release)
    # As the runtime makes its own: a task's calls hold one connection of the pool.
    pool = redis.ConnectionPool(connection_class=connection)
    runtime = runtime_for(app)
    runtime.engine = LockEngine(redis.Redis(connection_pool=pool), hold_connection=True)
    # The operator's holds are read by a thread of the process (gates.hold_watch), on a client of
    # its own, canned too: at the first call, then once a second in a worker whatever its calls
    # (here once an hour: the reads are not the task's path, and would count by the run's length).
    runtime.background_client = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=connection))
    WATCH.get().interval = 3600
    if "singleton" in tasks:  # as its backend makes its client (Redis.from_url, decoding)
        backend = RedisBackend.__new__(RedisBackend)
        backend.redis = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=connection, decode_responses=True)
        )
        tasks["singleton"]._singleton_backend = backend  # type: ignore[attr-defined]
    if "once" in tasks:  # its backend's one client per process (StrictRedis, from the URL)
        once_redis.redis = redis.StrictRedis(
            connection_pool=redis.ConnectionPool(connection_class=connection)
        )
    return app, tasks


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


def runner(app: Celery, task: Task[Any, Any], *, send: bool = True) -> Callable[[int], Any]:
    """One call ``task(i)`` as the caller sends it (``apply_async``, unless ``send`` is False)
    and a worker's pool process runs it (Celery's tracer); returns what the body returned."""
    tracer = build_tracer(task.name, task, app=app, eager=False, propagate=False)

    def call(i: int) -> Any:
        task_id = str(uuid.uuid4())
        if send:
            task.apply_async((i,), task_id=task_id)
        return tracer(task_id, [i], {}, _request(task_id, i))[0]

    return call


def user_us_per_task(app: Celery, task: Task[Any, Any], n: int, first: int, *, send: bool = True) -> float:
    """Send and trace ``n`` calls of ``task`` (``send``: sent too); user CPU µs a call."""
    call = runner(app, task, send=send)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_utime
    for i in range(first, first + n):
        if call(i) != i:
            raise RuntimeError(f"{task.name} did not run its body for {i}")
    return (resource.getrusage(resource.RUSAGE_THREAD).ru_utime - before) / n * 1e6


def warm_up(app: Celery, tasks: dict[str, Task[Any, Any]], send: bool) -> None:
    """Imports, plans, first allocations and connections, for every variant."""
    for task in tasks.values():
        user_us_per_task(app, task, 300, 0, send=send)


#: Where this package's code lives: frames of other files are not counted by ``--opcodes``.
PACKAGE_DIR = os.path.dirname(os.path.abspath(celery_redislock.__file__))


def opcodes_per_task(app: Celery, task: Task[Any, Any], n: int, send: bool) -> Counter[str]:
    """Bytecodes executed per task in this package's functions (``module:function``), over
    ``n`` calls of ``task``."""
    call = runner(app, task, send=send)
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
            call(i)
    finally:
        sys.settrace(None)
    return Counter({name: round(count / n) for name, count in counts.items()})


def print_opcodes(n: int, release: str, send: bool, explain: bool = True) -> int:
    app, tasks = make_app(release, explain=explain)
    warm_up(app, tasks, send)
    counts = opcodes_per_task(app, tasks["locked"], n, send)
    print(
        f"bytecodes a task executes in celery_redislock, by function ({n} tasks, replies canned, release: {release}):"
    )
    for name, count in counts.most_common():
        if count:
            print(f"  {count:6,d}  {name}")
    print(f"  {sum(counts.values()):6,d}  all")
    return 0


def enable_tracing() -> None:
    """Trace every task as a traced worker does: the OpenTelemetry SDK recording a span a task
    (opentelemetry-instrumentation-celery's), its spans dropped as they end, so the lock's span
    events are made and kept on a recording span."""
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())  # no processor: each span is dropped at its end
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


#: The flags a counted run (``--only``) is given again: what it measures the same way.
_PASSED = ("--tracing", "--no-explain")


def instructions(kind: str, n: int, release: str, send: bool) -> int:
    """Instructions a run of this module with ``--only kind --n n`` executes (callgrind)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, "-m", "benchmarks.task_path", "--only", kind, "--n", str(n)]
    command += ["--release", release] + ([] if send else ["--run-only"])
    command += [flag for flag in _PASSED if flag in sys.argv]
    # One hash seed: dicts and sets are laid out, and so walked, alike in every run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1))


def count_instructions(n: int, release: str, send: bool, kinds: list[str]) -> int:
    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind on PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    setup = instructions("none", n, release, send)
    counted = {kind: (instructions(kind, n, release, send) - setup) / n for kind in kinds}
    print(
        f"instructions per task, {what(send)}, a batch of {n} (callgrind, replies canned, release: {release}):"
    )
    print(f"  {'':28s} {'per task':>9s} {'over plain':>11s}")
    for kind, count in counted.items():
        print(f"  {LABELS[kind]:28s} {count:9,.0f} {count - counted['plain']:11,.0f}")
    return 0


def what(send: bool) -> str:
    return "sent and run" if send else "run only (the pool child's share)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.task_path", description=__doc__)
    parser.add_argument("--n", type=int, help="tasks per batch (default 5000; 1000 with --instructions)")
    parser.add_argument("--repeats", type=int, default=9, help="batches of each, interleaved")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind)")
    parser.add_argument("--opcodes", action="store_true", help="count our bytecodes by function")
    parser.add_argument(
        "--release", choices=RELEASES, default="script", help="the server's release (default: script)"
    )
    parser.add_argument(
        "--run-only", action="store_true", help="the tracer alone: no apply_async (a pool child's share)"
    )
    parser.add_argument(
        "--tracing", action="store_true", help="every task traced (OpenTelemetry SDK, a span a task)"
    )
    parser.add_argument(
        "--no-explain", action="store_true", help="redislock_explain = False: no record of decisions"
    )
    parser.add_argument("--only", choices=("none", *LABELS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    send = not args.run_only
    if args.tracing:
        enable_tracing()
    app, tasks = make_app(args.release, explain=not args.no_explain)
    if args.instructions:
        return count_instructions(args.n or 1000, args.release, send, list(tasks))
    if args.opcodes:
        return print_opcodes(args.n or 1000, args.release, send, not args.no_explain)
    args.n = args.n or 5000
    warm_up(app, tasks, send)
    if args.only is not None:  # one batch of one kind, counted from outside (--instructions)
        # Every variant's batch starts with the collector's counts at zero: otherwise a full
        # collection of the whole heap, due to the warm-up's garbage, lands in one variant's
        # batch and not another's (tens of thousands of instructions a task at --n 300).
        gc.collect()
        if args.only != "none":
            user_us_per_task(app, tasks[args.only], args.n, 1000, send=send)
        return 0
    runs: dict[str, list[float]] = {name: [] for name in tasks}
    first = 1000
    for _ in range(args.repeats):
        for name, task in tasks.items():
            runs[name].append(user_us_per_task(app, task, args.n, first, send=send))
            first += args.n
    medians = {name: statistics.median(times) for name, times in runs.items()}
    print(
        f"user CPU µs per task, {what(send)}, median of {args.repeats} batches of {args.n} (replies canned):"
    )
    print(f"  {'':28s} {'per task':>9s} {'over plain':>11s}")
    for name, us in medians.items():
        print(f"  {LABELS[name]:28s} {us:9.1f} {us - medians['plain']:11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
