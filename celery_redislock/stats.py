"""Counters of lock events, shared by a worker's forked processes, read by `inspect redislock_stats`."""

from __future__ import annotations

import mmap
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

COUNTER_NAMES = (
    "acquired",
    "skipped",
    "retried",
    "waited",
    "lost",
    "retaken",
    "released",
    "redis_errors",
    # apply_async calls refused by a lock taken at enqueue (lock_on="enqueue"): counted in the
    # sending process, so a worker reports those its own tasks sent.
    "refused_at_send",
    # The dedup modes (README, "Which call runs"): calls refused inside a throttle's window (in
    # the worker or at send), pending keep_latest calls replaced by a later one, debounced calls
    # superseded by a later call of their burst.
    "throttled",
    "replaced",
    "debounced",
)

_INDEX = {name: index for index, name in enumerate(COUNTER_NAMES)}
_SIZE = len(COUNTER_NAMES) * 8  # one signed 64-bit integer each

if sys.platform == "win32":  # no fork there: the in-process lock alone is enough

    def _lock_file(fd: int) -> None:
        pass

    def _unlock_file(fd: int) -> None:
        pass

else:
    import fcntl

    # A POSIX record lock, not a multiprocessing.Lock: the kernel drops it when its holder
    # dies, so a child SIGKILLed mid-increment (hard time limit, OOM) cannot wedge the others.
    def _lock_file(fd: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_EX)

    def _unlock_file(fd: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_UN)


def _anonymous_file(size: int) -> int:
    """A descriptor of ``size`` zero bytes that no path names (freed with its last process)."""
    if sys.platform == "linux":
        fd = os.memfd_create("celery_redislock-counters")
    else:
        fd, path = tempfile.mkstemp(prefix="celery_redislock-counters-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


class Counters:
    """Thread- and process-safe counters, in memory shared with every process forked later.

    A prefork worker imports this package before it forks its pool, so its children inherit
    the same pages: an increment in any child (or in the parent) is seen by all, and the
    parent, which answers ``inspect``, reports the whole worker. No Redis on the way: an
    increment costs a lock and a memory write.

    Caveat: only *forked* processes share. A process started with the ``spawn`` or
    ``forkserver`` method (or any separate ``celery worker``) has its own counters, as does a
    ``Counters`` created after the fork. ``reset()`` resets them for every process sharing.
    """

    def __init__(self) -> None:
        # Nothing is mapped until a worker (or a first count) needs it: importing the package
        # in a process that only sends tasks creates no file and no mapping.
        self._fd = -1
        self._values: memoryview | None = None
        self._lock = threading.Lock()  # the file lock is per process: threads need their own
        if hasattr(os, "register_at_fork"):
            this = weakref.ref(self)

            def renew_lock() -> None:
                # A thread of the parent may have held the lock at fork: the child's copy
                # would stay locked forever.
                counters = this()
                if counters is not None:
                    counters._lock = threading.Lock()

            os.register_at_fork(after_in_child=renew_lock)

    def share(self) -> memoryview:
        """Map the shared memory now, if not yet: a worker calls this before it forks its pool,
        so every child counts into the same pages."""
        with self._lock:
            if self._values is None:
                self._fd = _anonymous_file(_SIZE)
                # MAP_SHARED (mmap's default): a child writes the pages its parent reads.
                self._values = memoryview(mmap.mmap(self._fd, _SIZE)).cast("q")
            return self._values

    def incr(self, name: str, by: int = 1) -> None:
        index = _INDEX.get(name)
        if index is None:
            raise KeyError(f"unknown counter {name!r}; known: {', '.join(COUNTER_NAMES)}")
        values = self._values if self._values is not None else self.share()
        # _exclusive() spelled out: a worker counts twice per task, and the generator-based
        # context manager cost as much as the two lock calls.
        with self._lock:
            try:
                _lock_file(self._fd)
                values[index] += by
            finally:
                _unlock_file(self._fd)

    def snapshot(self) -> dict[str, int]:
        with self._exclusive() as values:
            return dict(zip(COUNTER_NAMES, values.tolist()))

    def reset(self) -> None:
        with self._exclusive() as values:
            for index in range(len(COUNTER_NAMES)):
                values[index] = 0

    @contextmanager
    def _exclusive(self) -> Iterator[memoryview]:
        """The values, locked against this process's threads and every other process."""
        values = self.share()
        with self._lock:
            try:
                _lock_file(self._fd)
                yield values
            finally:
                _unlock_file(self._fd)  # harmless if the lock was never taken


counters = Counters()
