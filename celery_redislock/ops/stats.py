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
from typing import Any

from celery import signals

from ..engine.counting import MAX_COUNTERS, POSITIONS, add_count_listener, counter_names, not_registered
from ..integration.liveness import process_alive

# The shared memory is a table of rows of signed 64-bit integers: the owner's pid, then one
# value per counter, in the column of its place in the registry (engine.counting: the core's
# counters, then the modes' and gates'), room left for every counter that may register. Each
# process counts in a row of its own, so an increment takes no lock shared with other processes
# (two record-lock calls an increment were a worker's largest cost after its round trips, and a
# child preempted holding the lock stalled the other). The totals are the sum of the rows, less
# the baseline row that reset() moves.
_WIDTH = 1 + MAX_COUNTERS
#: Rows of processes that counted and are gone (folded in when their row is reused), and of
#: increments made while every row was taken.
_RETIRED = 0
#: The totals at the last reset(), subtracted from every snapshot.
_BASELINE = 1
_FIRST_OWN = 2
#: Processes counting at once without the shared lock (a worker's parent and its children).
ROWS = 512

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

    A prefork worker maps them before it forks its pool, so its children inherit the same
    pages: an increment in any child (or in the parent) is seen by all, and the parent, which
    answers ``inspect``, reports the whole worker. No Redis on the way: an increment costs an
    in-process lock and a memory write in the process's own row.

    The counters are those registered (``engine.counting``: the core's, the modes' and the
    gates'), each in a column of its own, whenever they registered: the table has room for
    every counter that may.

    Caveat: only *forked* processes share. A process started with the ``spawn`` or
    ``forkserver`` method (or any separate ``celery worker``) has its own counters, as does a
    ``Counters`` created after the fork, and a counter registered in a child only (a mode
    imported by a task) is not known to the parent that reports. ``reset()`` resets them for
    every process sharing.
    """

    def __init__(self, rows: int = ROWS) -> None:
        if rows <= _FIRST_OWN:
            raise ValueError(f"Counters needs more than {_FIRST_OWN} rows, got {rows}")
        self._rows = rows
        # Nothing is mapped until a worker (or a first count) needs it: importing the package
        # in a process that only sends tasks creates no file and no mapping.
        self._fd = -1
        self._values: memoryview | None = None
        # Where this process's row starts (None: not claimed yet; -1: no row was free).
        self._row: int | None = None
        self._lock = threading.Lock()  # the row and the file lock are per process: threads need their own
        if hasattr(os, "register_at_fork"):
            this = weakref.ref(self)

            def in_child() -> None:
                # The child counts in a row of its own; a thread of the parent may have held
                # the lock at fork, and the child's copy would stay locked forever.
                counters = this()
                if counters is not None:
                    counters._lock = threading.Lock()
                    counters._row = None

            os.register_at_fork(after_in_child=in_child)

    def share(self) -> memoryview:
        """Map the shared memory now, if not yet: a worker calls this before it forks its pool,
        so every child counts into the same pages."""
        with self._lock:
            if self._values is None:
                size = self._rows * _WIDTH * 8
                self._fd = _anonymous_file(size)
                # MAP_SHARED (mmap's default): a child writes the pages its parent reads.
                self._values = memoryview(mmap.mmap(self._fd, size)).cast("q")
            return self._values

    def incr(self, name: str, by: int = 1) -> None:
        """``by`` more of the registered counter ``name``; an unknown name is logged once and
        not counted (``engine.counting.count`` says why)."""
        index = POSITIONS.get(name)
        if index is None:
            not_registered(name)
            return
        row = self._row
        if row is None:
            row = self._claim_row()
        values = self._values
        assert values is not None  # mapped by _claim_row
        if row < 0:  # every row taken: count in the shared row, under the shared lock
            with self._exclusive():
                values[_RETIRED * _WIDTH + 1 + index] += by
            return
        with self._lock:
            values[row + 1 + index] += by

    def snapshot(self) -> dict[str, int]:
        """Every registered counter's total over every process sharing, in registration order."""
        names = counter_names()
        with self._exclusive() as values:
            totals = self._totals(values, len(names))
            baseline = values[_BASELINE * _WIDTH + 1 : (_BASELINE + 1) * _WIDTH]
            return {name: totals[i] - baseline[i] for i, name in enumerate(names)}

    def reset(self) -> None:
        # The baseline moves to the totals: no process's row is written by another, so an
        # increment running meanwhile is never lost or resurrected.
        with self._exclusive() as values:
            for index, total in enumerate(self._totals(values, MAX_COUNTERS)):
                values[_BASELINE * _WIDTH + 1 + index] = total

    def _totals(self, values: memoryview, columns: int) -> list[int]:
        """The sums of the first ``columns`` counters over every row but the baseline."""
        totals = [0] * columns
        for row in range(self._rows):
            if row == _BASELINE:
                continue
            start = row * _WIDTH + 1
            for index, value in enumerate(values[start : start + columns]):
                totals[index] += value
        return totals

    def _claim_row(self) -> int:
        """Take a free row for this process (or one of a process that is gone, its counts
        folded into the retired row first); -1 when every row belongs to a live process."""
        with self._exclusive() as values:
            if self._row is not None:  # another thread of this process claimed it meanwhile
                return self._row
            pid = os.getpid()
            free = next((r for r in range(_FIRST_OWN, self._rows) if values[r * _WIDTH] == 0), None)
            if free is None:
                free = self._reuse_dead_row(values)
            if free is None:
                self._row = -1
                return -1
            values[free * _WIDTH] = pid
            self._row = free * _WIDTH
            return self._row

    def _reuse_dead_row(self, values: memoryview) -> int | None:
        found = None
        for row in range(_FIRST_OWN, self._rows):
            start = row * _WIDTH
            owner = values[start]
            if owner == os.getpid() or process_alive(owner):
                continue
            for index in range(1, _WIDTH):
                values[_RETIRED * _WIDTH + index] += values[start + index]
                values[start + index] = 0
            values[start] = 0
            found = row if found is None else found
        return found

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
# Every count of the engine and the Celery glue lands here.
add_count_listener(counters.incr)


@signals.worker_init.connect(weak=False)
def _share_counters(**_: Any) -> None:
    # Sent in the worker's main process before it forks its pool: the children then count
    # into the memory the parent answers `inspect redislock_stats` from.
    counters.share()
