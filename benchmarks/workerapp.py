"""The benchmark's Celery app: one config, one pair of tasks per lock implementation.

The same source runs in the driver (which sends the tasks) and, copied into a temporary
directory with a ``make_app(...)`` call appended, as the prefork worker's app module.
So it imports nothing from the ``benchmarks`` package.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any
from urllib.parse import urlparse

import redis
from celery import Celery, Task, signals

from celery_redislock import SingletonTask

try:  # peers are optional (the [bench] extra); a missing one is reported, not fatal
    from celery_singleton import Singleton
except ImportError:  # pragma: no cover - depends on the environment
    Singleton = None
try:
    from celery_once import QueueOnce
except ImportError:  # pragma: no cover
    QueueOnce = None


# This process's raw socket to the lock Redis: (pid, socket); a forked child makes its own.
_raw: list[tuple[int, socket.socket]] = []


def raw_command(app: Celery, *args: bytes) -> bytes:
    """One command on a raw socket of this process's own to ``app``'s lock Redis, packed and
    read by hand, with no library code around it: the least a round trip costs a process."""
    if not _raw or _raw[0][0] != os.getpid():
        where = urlparse(app.conf.redislock_url)  # read once a process, not once a command
        sock = socket.create_connection((where.hostname or "127.0.0.1", where.port or 6379))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _raw[:] = [(os.getpid(), sock)]
    sock = _raw[0][1]
    sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    return sock.recv(1024)  # "+OK", "$-1" or ":1": one short line, read whole


class RawSocketLock(Task):  # type: ignore[type-arg]
    """Not a lock anyone should use: the least two round trips can cost in a pool child.

    ``SET key id NX PX`` before the body and ``DEL key`` after it (the peers' two commands) on
    a raw socket (``raw_command``): what any lock that takes and frees its key in the worker
    pays at the least."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = f"floor:{self.name}:{args!r}".encode()
        raw_command(self.app, b"SET", key, str(self.request.id).encode(), b"NX", b"PX", b"60000")
        try:
            return self.run(*args, **kwargs)
        finally:
            raw_command(self.app, b"DEL", key)


#: Variant name -> (base class or None when not installed, extra task options).
#: "plain" is the yardstick every ratio is taken against.
VARIANTS: dict[str, tuple[type[Task[Any, Any]] | None, dict[str, Any]]] = {
    "plain": (Task, {}),
    "redislock": (SingletonTask, {}),
    "redislock-enqueue": (SingletonTask, {"lock_on": "enqueue"}),
    # What an opt-in fencing token costs: the acquire script instead of SET NX, and its counter.
    "redislock-fencing": (SingletonTask, {"fencing": True}),
    "celery-singleton": (Singleton, {}),
    # Not a lock: two commands on a raw socket, what any take-in-the-worker lock pays at least.
    "floor": (RawSocketLock, {}),
    # graceful: a duplicate call returns a REJECTED EagerResult instead of raising AlreadyQueued.
    "celery-once": (QueueOnce, {"once": {"graceful": True}}),
}

#: ``benchmarks.placement``'s task: a noop that first does what its message's headers say, in
#: the worker's parent as it receives the message (``PARENT_*``) and in the pool child before
#: the body (``CHILD_*``): spin for so many µs of CPU (``*_US``), or make one round trip to
#: the lock Redis (``*_TRIP``, a ``SET NX PX`` on a raw socket, waiting for its reply). What
#: CPU and a lock's round trip cost the worker, by where.
PROBE = "bench.probe.spin"
PARENT_US = "bench_parent_us"
CHILD_US = "bench_child_us"
PARENT_TRIP = "bench_parent_trip"
CHILD_TRIP = "bench_child_trip"


def spin(us: float) -> None:
    """Use ``us`` microseconds of CPU (the thread's own clock: a spin preempted midway still
    uses them all)."""
    end = time.thread_time() + us / 1e6
    while time.thread_time() < end:
        pass


def probe_work(where: str, app: Celery, task_id: str, us: Any, trip: Any) -> None:
    spin(float(us or 0))
    if trip:  # the key says where it was set (the placement test counts them)
        raw_command(app, b"SET", f"bench:probe:{where}:{task_id}".encode(), b"1", b"NX", b"PX", b"60000")


class Spin(Task):  # type: ignore[type-arg]
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        us, trip = getattr(request, CHILD_US, None), getattr(request, CHILD_TRIP, None)
        probe_work("child", self.app, str(request.id), us, trip)
        return self.run(*args, **kwargs)


def probe_on_receipt(sender: Any = None, request: Any = None, **_: Any) -> None:
    """``task_received``, in the worker's parent: the probe's ``PARENT_*`` work."""
    if request is not None and request.name == PROBE:
        headers = request.request_dict
        us, trip = headers.get(PARENT_US), headers.get(PARENT_TRIP)
        probe_work("parent", request.task.app, str(request.id), us, trip)


#: Why a variant cannot run here (shown in the report), by name.
UNAVAILABLE = {
    name: "not installed: pip install -e '.[bench]'" for name, (base, _) in VARIANTS.items() if base is None
}

#: Seconds every lock implementation keeps a lock without renewal (only ours renews).
LOCK_TTL = 60

# Per process (a forked child makes its own on first use): counts executions and overlaps.
_coord: list[redis.Redis] = []


def coord_client(url: str) -> redis.Redis:
    if not _coord or _coord[0].connection_pool.pid != os.getpid():
        _coord[:] = [redis.Redis.from_url(url)]
    return _coord[0]


def track(url: str, variant: str, tag: str, key: str, seconds: float) -> None:
    """A body that notes it ran, and whether another execution of ``key`` ran at the same time."""
    client = coord_client(url)
    active = f"bench:active:{variant}:{tag}:{key}"
    pipe = client.pipeline(transaction=False)
    pipe.incr(active)
    pipe.incr(f"bench:ran:{variant}:{tag}")
    now_active, _ = pipe.execute()
    if now_active > 1:
        client.incr(f"bench:overlaps:{variant}:{tag}")
    time.sleep(seconds)
    client.decr(active)


def make_app(broker: str, results: str, locks: str, coord: str, probe: bool = False) -> Celery:
    """The app, with a ``noop`` and a ``sleep`` task per available variant, all named
    ``bench.<variant>.<noop|sleep>``, and every lock implementation pointed at ``locks``; with
    ``probe``, ``PROBE`` too (and its parent's share, connected to ``task_received``)."""
    app = Celery("bench", set_as_current=False)
    app.conf.update(
        broker_url=broker,
        result_backend=results,
        broker_connection_retry_on_startup=False,
        task_default_queue="bench",
        worker_hijack_root_logger=False,
        # The three lock implementations, on the same (dedicated) Redis, with one TTL.
        redislock_url=locks,
        redislock_options={"lock_timeout": LOCK_TTL},
        singleton_backend_url=locks,
        singleton_lock_expiry=LOCK_TTL,
        ONCE={
            "backend": "celery_once.backends.Redis",
            "settings": {"url": locks, "default_timeout": LOCK_TTL},
        },
    )
    for variant, (base, options) in VARIANTS.items():
        if base is None:
            continue

        def noop(i: int) -> int:
            return i

        def sleep(tag: str, key: str, seconds: float, variant: str = variant) -> None:
            track(coord, variant, tag, key, seconds)

        for func in (noop, sleep):
            app.task(name=f"bench.{variant}.{func.__name__}", base=base, shared=False, **options)(func)  # type: ignore[no-untyped-call]
    if probe:

        def spun(i: int) -> int:
            return i

        app.task(name=PROBE, base=Spin, shared=False)(spun)
        signals.task_received.connect(probe_on_receipt, weak=False)
    return app
