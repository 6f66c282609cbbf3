"""Counters of lock events, shared by a worker's forked processes, read by `inspect redislock_stats`."""

from __future__ import annotations

import bisect
import functools
import logging
import mmap
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import signals

from ..engine.counting import MAX_COUNTERS, POSITIONS, add_count_listener, counter_names, not_registered
from ..engine.leases import Lease
from ..engine.renewal import add_cycle_listener, task_of_key
from ..engine.timing import to_us, us_seconds
from ..integration.liveness import process_alive
from .shared_memory import anonymous_file, lock_file, unlock_file

logger = logging.getLogger(__name__)

# The shared memory is a table of rows of signed 64-bit integers: the owner's pid, then a value
# per counter in the column of its place in the registry (engine.counting), with room for every
# counter that may register. Each process counts in a row of its own, so an increment takes no
# lock shared with other processes (a shared record lock was a worker's largest cost after its
# round trips). The totals are the sum of the rows, less the baseline row that reset() moves.
_WIDTH = 1 + MAX_COUNTERS
#: Rows of processes gone (folded in when their row is reused), and counts made with every row taken.
_RETIRED = 0
#: The totals at the last reset(), subtracted from every snapshot.
_BASELINE = 1
_FIRST_OWN = 2
#: Processes counting at once without the shared lock (a worker's parent and its children).
ROWS = 512
#: Tasks counted apart (a slot each, taken by its first count); past these, in the totals only.
MAX_TASKS = 256
#: A task's slot names it in these bytes: a length byte pair, then the name in UTF-8.
_NAME_BYTES = 256
#: Per process and task: a column per counter, then the renewal thread's held locks and oldest's since.
_HELD = MAX_COUNTERS
_SINCE = MAX_COUNTERS + 1
_TASK_WIDTH = MAX_COUNTERS + 2
#: Upper bounds (seconds) of the renewal latency histogram's buckets; a last one is +Inf.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Per process: each bucket's count (+Inf last), then the count and the sum in microseconds.
_HIST_WIDTH = len(LATENCY_BUCKETS) + 3


class Counters:
    """Thread- and process-safe counters, in memory shared with every process forked later.

    A prefork worker maps them before it forks its pool: an increment in any child (a lock of
    its own process and a write in its own row, no Redis) is seen by the parent, which answers
    ``inspect`` for the whole worker. Each registered counter (``engine.counting``) has a column
    whenever it registered; a count made for a task is also kept in that task's slot
    (``by_task``), taken by its first count in any process sharing, up to ``MAX_TASKS``.

    Caveat: only *forked* processes share. A process started by ``spawn`` or ``forkserver`` (or
    another worker), a ``Counters`` created after the fork, and a counter registered in a child
    only (a mode imported by a task) are not seen by the parent. ``reset()`` resets them all.
    """

    def __init__(self, rows: int = ROWS) -> None:
        if rows <= _FIRST_OWN:
            raise ValueError(f"Counters needs more than {_FIRST_OWN} rows, got {rows}")
        self._rows = rows
        # Nothing is mapped until a worker (or a first count) needs it: importing the package
        # in a process that only sends tasks creates no file and no mapping.
        self._fd = -1
        self._values: memoryview | None = None
        self._names: memoryview | None = None
        # Where this process's row starts (None: not claimed yet; -1: no row was free).
        self._row: int | None = None
        # Where each task's columns start in this process's row (-1: no slot for it).
        self._task_at: dict[str, int] = {}
        # What counts each (counter, task) in this process, found once (see adder).
        self._adders: dict[tuple[str, str | None], Callable[[int], None]] = {}
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
                    counters._task_at, counters._adders = {}, {}

            os.register_at_fork(after_in_child=in_child)

    # The mapping, in 64-bit integers: the counters' rows, the count of task slots taken, each
    # task slot's name (bytes), then per row: a block of every task's columns, and a histogram.
    def _names_at(self) -> int:
        return self._rows * _WIDTH + 1

    def _tasks_at(self) -> int:
        return self._names_at() + MAX_TASKS * _NAME_BYTES // 8

    def _hist_at(self) -> int:
        return self._tasks_at() + self._rows * MAX_TASKS * _TASK_WIDTH

    def _task_block(self, row: int) -> int:
        """Where the task columns of the row starting at ``row`` start."""
        return self._tasks_at() + row // _WIDTH * MAX_TASKS * _TASK_WIDTH

    def share(self) -> memoryview:
        """Map the shared memory now, if not yet: a worker calls this before it forks its pool,
        so every child counts into the same pages."""
        with self._lock:
            if self._values is None:
                # Sparse: only the pages written take memory (the task slots a worker uses).
                size = (self._hist_at() + self._rows * _HIST_WIDTH) * 8
                self._fd = anonymous_file(size)
                # MAP_SHARED (mmap's default): a child writes the pages its parent reads.
                mapped = memoryview(mmap.mmap(self._fd, size))
                self._names = mapped[self._names_at() * 8 : self._tasks_at() * 8]
                self._values = mapped.cast("q")
            return self._values

    def incr(self, name: str, by: int = 1, task: str | None = None) -> None:
        """``by`` more of counter ``name`` (and of ``task``'s); an unknown name is logged once."""
        self.adder(name, task)(by)

    def adder(self, name: str, task: str | None = None) -> Callable[[int], None]:
        """What adds to counter ``name`` (and to ``task``'s) in this process's row, found once:
        a ``Tally`` keeps it, so a count is one call and a store or two under the row's lock."""
        return self._adders.get((name, task)) or self._make_adder(name, task)

    def _make_adder(self, name: str, task: str | None) -> Callable[[int], None]:
        index = POSITIONS.get(name)
        if index is None:  # not kept: the name may register later
            not_registered(name)
            return lambda by: None
        row = self._row if self._row is not None else self._claim_row()
        if row < 0:  # every row taken: in the retired row, under the shared lock (not kept)
            return functools.partial(self._add_retired, _RETIRED * _WIDTH + 1 + index)
        at = -1 if task is None else self._task_at.get(task)
        if at is None:
            at = self._task_slot(task)  # type: ignore[arg-type]  # not None: checked above
        values, lock, total, of_task = self.share(), self._lock, row + 1 + index, at + index

        def add(by: int) -> None:
            with lock:
                values[total] += by

        def add_both(by: int) -> None:
            with lock:
                values[total] += by
                values[of_task] += by

        self._adders[(name, task)] = add if at < 0 else add_both
        return self._adders[(name, task)]

    def _add_retired(self, at: int, by: int) -> None:
        with self._exclusive() as values:
            values[at] += by

    def snapshot(self) -> dict[str, int]:
        """Every registered counter's total over every process sharing, in registration order."""
        names = counter_names()
        with self._exclusive() as values:
            totals = self._totals(values, len(names))
            baseline = values[_BASELINE * _WIDTH + 1 : (_BASELINE + 1) * _WIDTH]
            return {name: totals[i] - baseline[i] for i, name in enumerate(names)}

    def by_task(self) -> dict[str, dict[str, int]]:
        """Each task's counters (every registered one, in registration order), for the tasks
        counted since the table was mapped, over every process sharing."""
        names = counter_names()
        with self._exclusive() as values:
            rows = self._rows_counted(values)
            tasks: dict[str, dict[str, int]] = {}
            for slot, task in enumerate(self._slot_names(values)):
                column = slot * _TASK_WIDTH
                base = self._task_block(_BASELINE * _WIDTH) + column
                totals = [-values[base + i] for i in range(len(names))]
                for row in rows:
                    start = self._task_block(row * _WIDTH) + column
                    for i, value in enumerate(values[start : start + len(names)]):
                        totals[i] += value
                tasks[task] = dict(zip(names, totals))
            return tasks

    def held(self) -> dict[str, tuple[int, int]]:
        """Per task: ``(locks held, since when the oldest is held, in Unix seconds)`` by the live
        processes sharing, as their renewal threads last wrote them (once a renewal interval)."""
        with self._exclusive() as values:
            pids = [(row, values[row * _WIDTH]) for row in self._rows_counted(values)[1:]]
            live = [row for row, pid in pids if pid == os.getpid() or process_alive(pid)]
            held: dict[str, tuple[int, int]] = {}
            for slot, task in enumerate(self._slot_names(values)):
                count, since = 0, 0
                for row in live:
                    start = self._task_block(row * _WIDTH) + slot * _TASK_WIDTH
                    count += values[start + _HELD]
                    oldest = values[start + _SINCE]
                    since = oldest if oldest and (not since or oldest < since) else since
                if count:
                    held[task] = (count, since)
            return held

    def latencies(self) -> tuple[list[int], int, float]:
        """The renewal latency histogram over every process sharing: the count of each bucket of
        ``LATENCY_BUCKETS`` (not cumulative, +Inf last), the count, and the sum in seconds."""
        with self._exclusive() as values:
            totals = [0] * _HIST_WIDTH
            for row in self._rows_counted(values):
                start = self._hist_at() + row * _HIST_WIDTH
                for i, value in enumerate(values[start : start + _HIST_WIDTH]):
                    totals[i] += value
        return totals[:-2], totals[-2], us_seconds(totals[-1])

    def renewed(self, held: list[tuple[str, float]], latencies: list[float]) -> None:
        """A renewal cycle of this process: the locks it holds now (each one's task, and since
        when, in Unix seconds), and the seconds each renewal round trip took."""
        row = self._row
        if row is None:
            row = self._claim_row()
        values = self._values
        assert values is not None
        if row < 0:
            return
        places = [(self._task_slot(task), since) for task, since in held]
        hist = self._hist_at() + row // _WIDTH * _HIST_WIDTH
        with self._lock:
            for at in self._task_at.values():  # the gauges of the last cycle are replaced
                if at >= 0:
                    values[at + _HELD] = values[at + _SINCE] = 0
            for at, since in places:
                if at >= 0:
                    values[at + _HELD] += 1
                    oldest = values[at + _SINCE]
                    values[at + _SINCE] = int(since) if not oldest else min(oldest, int(since))
            for seconds in latencies:
                values[hist + bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
                values[hist + _HIST_WIDTH - 2] += 1
                values[hist + _HIST_WIDTH - 1] += to_us(seconds)

    def reset(self) -> None:
        # The baseline moves to the totals: no process's row is written by another, so an
        # increment running meanwhile is never lost or resurrected.
        with self._exclusive() as values:
            for index, total in enumerate(self._totals(values, MAX_COUNTERS)):
                values[_BASELINE * _WIDTH + 1 + index] = total
            rows = self._rows_counted(values)
            baseline = self._task_block(_BASELINE * _WIDTH)
            for slot in range(values[self._names_at() - 1]):
                for index in range(MAX_COUNTERS):
                    column = slot * _TASK_WIDTH + index
                    values[baseline + column] = sum(
                        values[self._task_block(r * _WIDTH) + column] for r in rows
                    )

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

    def _rows_counted(self, values: memoryview) -> list[int]:
        """The rows that may hold counts: the retired one and those of a process."""
        return [_RETIRED] + [r for r in range(_FIRST_OWN, self._rows) if values[r * _WIDTH]]

    def _slot_names(self, values: memoryview) -> list[str]:
        names = self._names
        assert names is not None
        found = []
        for slot in range(values[self._names_at() - 1]):
            start = slot * _NAME_BYTES
            length = int.from_bytes(names[start : start + 2], "little")
            found.append(bytes(names[start + 2 : start + 2 + length]).decode())
        return found

    def _task_slot(self, task: str) -> int:
        """Where ``task``'s columns start in this process's row (-1: not counted by task): its
        slot, found or taken under the shared lock once a process and task."""
        row = self._row
        if row is None:
            row = self._claim_row()
        encoded = task.encode()
        with self._exclusive() as values:
            found = self._task_at.get(task)
            if found is not None:
                return found
            names = self._slot_names(values)
            if task in names:
                slot = names.index(task)
            elif len(names) < MAX_TASKS and len(encoded) <= _NAME_BYTES - 2:
                slot = len(names)
                start = slot * _NAME_BYTES
                assert self._names is not None
                self._names[start : start + 2] = len(encoded).to_bytes(2, "little")
                self._names[start + 2 : start + 2 + len(encoded)] = encoded
                values[self._names_at() - 1] = slot + 1
            else:
                slot = -1
                logger.warning(
                    "Counting %r in the totals only: %d tasks are counted by task, or its name is too long",
                    task,
                    MAX_TASKS,
                )
            at = -1 if slot < 0 or row < 0 else self._task_block(row) + slot * _TASK_WIDTH
            self._task_at[task] = at
            return at

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
            self._fold(values, row)
            values[start] = 0
            found = row if found is None else found
        return found

    def _fold(self, values: memoryview, row: int) -> None:
        """Fold a dead process's task columns and histogram into the retired row's (its held
        locks are not held any more: its gauges are dropped)."""
        retired, block = self._task_block(_RETIRED * _WIDTH), self._task_block(row * _WIDTH)
        for column in range(values[self._names_at() - 1] * _TASK_WIDTH):
            kept = column % _TASK_WIDTH < MAX_COUNTERS
            values[retired + column] += values[block + column] if kept else 0
            values[block + column] = 0
        hist = self._hist_at()
        for index in range(_HIST_WIDTH):
            values[hist + _RETIRED * _HIST_WIDTH + index] += values[hist + row * _HIST_WIDTH + index]
            values[hist + row * _HIST_WIDTH + index] = 0

    @contextmanager
    def _exclusive(self) -> Iterator[memoryview]:
        """The values, locked against this process's threads and every other process."""
        values = self.share()
        with self._lock:
            try:
                lock_file(self._fd)
                yield values
            finally:
                unlock_file(self._fd)  # harmless if the lock was never taken


counters = Counters()
# Every count of the engine and the Celery glue lands here.
add_count_listener(counters.incr, counters.adder)


@signals.worker_init.connect(weak=False)
def _share_counters(**_: Any) -> None:
    # Sent in the worker's main process before it forks its pool: the children count into it.
    counters.share()


#: When the renewal thread first saw each lease this process holds (no clock read in a task).
_first_seen: dict[tuple[str, str], float] = {}


def _renewed(held: list[Lease], latencies: list[float]) -> None:
    now = time.time()
    seen = {(lease.key, lease.holder): _first_seen.get((lease.key, lease.holder), now) for lease in held}
    _first_seen.clear()
    _first_seen.update(seen)
    tasks = [(task_of_key(key), since) for (key, _), since in seen.items()]
    counters.renewed([(task, since) for task, since in tasks if task is not None], latencies)


add_cycle_listener(_renewed)
