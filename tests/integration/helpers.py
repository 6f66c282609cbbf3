"""Helpers of the RedisLock / RedisSemaphore tests: polling, and contenders in other processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import redis

from celery_redislock.contrib.testing import poll

__all__ = ["contenders", "inside_function", "killed_holder", "poll", "script_calls"]


#: A contender process: ``python -c CONTENDER url tag kind name limit threads rounds hold``.
#: Each thread acquires (a RedisLock, or a RedisSemaphore of ``limit``) ``rounds`` times and,
#: inside, runs ``inside(r, tag, limit)`` from the test module's shared text below.
CONTENDER = textwrap.dedent(
    """
    import sys, threading, time
    import redis
    from celery_redislock import RedisLock, RedisSemaphore

    url, tag, kind, name, limit, threads, rounds, hold = sys.argv[1:]
    r = redis.Redis.from_url(url)
    limit, threads, rounds, hold = int(limit), int(threads), int(rounds), float(hold)
    {inside}

    def contend():
        for _ in range(rounds):
            if kind == "lock":
                held = RedisLock(r, name, timeout=10, retry_delay=0.2)
            else:
                held = RedisSemaphore(r, name, limit, timeout=10, retry_delay=0.2)
            with held:
                inside(r, tag, limit, hold)
            r.rpush(tag + ":served", 1)

    workers = [threading.Thread(target=contend) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    """
)

#: What a contender does while it holds the lock or a slot (also run by the test's threads).
#: A slot is claimed with SET NX among ``limit`` numbered slots (none free: more than ``limit``
#: are inside); a ticket is bought with a non-atomic read-modify-write that only the lock
#: makes safe (a race would sell one ticket twice).
INSIDE = textwrap.dedent(
    """
    def inside(r, tag, limit, hold):
        now = r.incr(tag + ":inside")
        r.rpush(tag + ":seen", now)
        slot = next((n for n in range(limit) if r.set(f"{tag}:slot:{n}", 1, nx=True)), None)
        if slot is None:
            r.rpush(tag + ":overflow", 1)
        left = int(r.get(tag + ":left") or 0)
        if left > 0:
            time.sleep(hold)
            r.set(tag + ":left", left - 1)
            r.rpush(tag + ":sold", left)
        else:
            time.sleep(hold)
        if slot is not None:
            r.delete(f"{tag}:slot:{slot}")
        r.decr(tag + ":inside")
    """
)


def inside_function() -> Callable[[Any, str, int, float], None]:
    """``INSIDE`` as a function of this process."""
    namespace: dict[str, Any] = {"time": time}
    exec(INSIDE, namespace)
    function: Callable[[Any, str, int, float], None] = namespace["inside"]
    return function


@contextmanager
def contenders(
    url: str,
    tag: str,
    kind: str,
    name: str,
    limit: int,
    *,
    processes: int,
    threads: int,
    rounds: int,
    hold: float,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start ``processes`` contender processes; they are killed by pid if still running at exit."""
    source = CONTENDER.format(inside=textwrap.indent(INSIDE, "    ").strip())
    args = [url, tag, kind, name, str(limit), str(threads), str(rounds), str(hold)]
    started = [subprocess.Popen([sys.executable, "-c", source, *args]) for _ in range(processes)]
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


#: A holder that never lets go: ``python -c HOLDER url kind name limit timeout tag`` takes the
#: lock (or a slot), renewed, pushes its holder id on ``<tag>:held`` and sleeps until killed.
HOLDER = textwrap.dedent(
    """
    import sys, threading
    import redis
    from celery_redislock import RedisLock, RedisSemaphore

    url, kind, name, limit, timeout, tag = sys.argv[1:]
    r = redis.Redis.from_url(url)
    if kind == "lock":
        held = RedisLock(r, name, timeout=float(timeout))
    elif kind == "semaphore":
        held = RedisSemaphore(r, name, int(limit), timeout=float(timeout))
    else:  # a waiter: queues for a slot, calling again every 0.2 s, until killed
        held = RedisSemaphore(r, name, int(limit), timeout=float(timeout), retry_delay=0.2)
    if kind == "waiter":
        r.rpush(tag + ":held", "waiting")
    else:
        assert held.acquire()
        r.rpush(tag + ":held", held.holder)
    held.acquire() if kind == "waiter" else threading.Event().wait()
    """
)


@contextmanager
def holder_process(
    url: str, kind: str, name: str, limit: int, timeout: float, tag: str
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, url, kind, name, str(limit), str(timeout), tag])
    try:
        yield process
    finally:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


def killed_holder(
    client: redis.Redis, url: str, kind: str, name: str, limit: int, timeout: float, tag: str
) -> bytes:
    """Start a holder process (``HOLDER``), SIGKILL it once it holds, return its holder id."""
    with holder_process(url, kind, name, limit, timeout, tag) as process:
        assert poll(lambda: client.llen(tag + ":held") == 1, 15.0)
        dead = client.lindex(tag + ":held", 0)
        process.kill()
        process.wait(10)
    assert isinstance(dead, bytes)
    return dead


def script_calls(client: redis.Redis) -> int:
    """EVALSHA calls the server has served (none yet on a fresh server: no entry at all)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))
