"""The table a worker's counters are kept in, in memory its forked processes share: a row per
process, a slot per task, claimed under a lock a killed process cannot keep. What is counted in it
is ``stats``'."""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..engine.counting import MAX_COUNTERS
from ..engine.lateness import LATENESS_BUCKETS, MAX_LATENESS_KINDS
from ..integration.liveness import process_alive
from .shared_memory import anonymous_file, lock_file, unlock_file

__all__ = [
    "BASELINE",
    "HELD",
    "HIST_WIDTH",
    "LATE",
    "LATENCY_BUCKETS",
    "LATE_WIDTH",
    "MAX_TASKS",
    "RETIRED",
    "ROWS",
    "SINCE",
    "TASK_WIDTH",
    "WIDTH",
    "SharedTable",
]

logger = logging.getLogger(__name__)


# The shared memory is a table of rows of signed 64-bit integers: the owner's pid, then a value
# per counter in the column of its place in the registry (engine.counting), with room for every
# counter that may register. Each process counts in a row of its own, so an increment takes no
# lock shared with other processes (a shared record lock was a worker's largest cost after its
# round trips). The totals are the sum of the rows, less the baseline row that reset() moves.
WIDTH = 1 + MAX_COUNTERS
#: Rows of processes gone (folded in when their row is reused), and counts made with every row taken.
RETIRED = 0
#: The totals at the last reset(), subtracted from every snapshot.
BASELINE = 1
FIRST_OWN = 2
#: Processes counting at once without the shared lock (a worker's parent and its children).
ROWS = 512
#: Tasks counted apart (a slot each, taken by its first count); past these, in the totals only.
MAX_TASKS = 256
#: A task's slot names it in these bytes: a length byte pair, then the name in UTF-8.
NAME_BYTES = 256
#: Per process and task: a column per counter, then the renewal thread's held locks and oldest's
#: since, then per kind of wait a lateness histogram (each bucket's count, +Inf last, the count
#: and the sum in microseconds).
HELD = MAX_COUNTERS
SINCE = MAX_COUNTERS + 1
LATE = MAX_COUNTERS + 2
LATE_WIDTH = len(LATENESS_BUCKETS) + 3
TASK_WIDTH = LATE + MAX_LATENESS_KINDS * LATE_WIDTH
#: Upper bounds (seconds) of the renewal latency histogram's buckets; a last one is +Inf.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Per process: each bucket's count (+Inf last), then the count and the sum in microseconds.
HIST_WIDTH = len(LATENCY_BUCKETS) + 3


class SharedTable:
    """The rows and task slots of the shared table; ``stats.Counters`` counts in them."""

    def __init__(self, rows: int = ROWS) -> None:
        if rows <= FIRST_OWN:
            raise ValueError(f"Counters needs more than {FIRST_OWN} rows, got {rows}")
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
        return self._rows * WIDTH + 1

    def _tasks_at(self) -> int:
        return self._names_at() + MAX_TASKS * NAME_BYTES // 8

    def _hist_at(self) -> int:
        return self._tasks_at() + self._rows * MAX_TASKS * TASK_WIDTH

    def _task_block(self, row: int) -> int:
        """Where the task columns of the row starting at ``row`` start."""
        return self._tasks_at() + row // WIDTH * MAX_TASKS * TASK_WIDTH

    def share(self) -> memoryview:
        """Map the shared memory now, if not yet: a worker calls this before it forks its pool,
        so every child counts into the same pages."""
        with self._lock:
            if self._values is None:
                # Sparse: only the pages written take memory (the task slots a worker uses).
                size = (self._hist_at() + self._rows * HIST_WIDTH) * 8
                self._fd = anonymous_file(size)
                # MAP_SHARED (mmap's default): a child writes the pages its parent reads.
                mapped = memoryview(mmap.mmap(self._fd, size))
                self._names = mapped[self._names_at() * 8 : self._tasks_at() * 8]
                self._values = mapped.cast("q")
            return self._values

    def _totals(self, values: memoryview, columns: int) -> list[int]:
        """The sums of the first ``columns`` counters over every row but the baseline."""
        totals = [0] * columns
        for row in range(self._rows):
            if row == BASELINE:
                continue
            start = row * WIDTH + 1
            for index, value in enumerate(values[start : start + columns]):
                totals[index] += value
        return totals

    def _rows_counted(self, values: memoryview) -> list[int]:
        """The rows that may hold counts: the retired one and those of a process."""
        return [RETIRED] + [r for r in range(FIRST_OWN, self._rows) if values[r * WIDTH]]

    def _slot_names(self, values: memoryview) -> list[str]:
        names = self._names
        assert names is not None
        found = []
        for slot in range(values[self._names_at() - 1]):
            start = slot * NAME_BYTES
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
            elif len(names) < MAX_TASKS and len(encoded) <= NAME_BYTES - 2:
                slot = len(names)
                start = slot * NAME_BYTES
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
            at = -1 if slot < 0 or row < 0 else self._task_block(row) + slot * TASK_WIDTH
            self._task_at[task] = at
            return at

    def _claim_row(self) -> int:
        """Take a free row for this process (or one of a process that is gone, its counts
        folded into the retired row first); -1 when every row belongs to a live process."""
        with self._exclusive() as values:
            if self._row is not None:  # another thread of this process claimed it meanwhile
                return self._row
            pid = os.getpid()
            free = next((r for r in range(FIRST_OWN, self._rows) if values[r * WIDTH] == 0), None)
            if free is None:
                free = self._reuse_dead_row(values)
            if free is None:
                self._row = -1
                return -1
            values[free * WIDTH] = pid
            self._row = free * WIDTH
            return self._row

    def _reuse_dead_row(self, values: memoryview) -> int | None:
        found = None
        for row in range(FIRST_OWN, self._rows):
            start = row * WIDTH
            owner = values[start]
            if owner == os.getpid() or process_alive(owner):
                continue
            for index in range(1, WIDTH):
                values[RETIRED * WIDTH + index] += values[start + index]
                values[start + index] = 0
            self._fold(values, row)
            values[start] = 0
            found = row if found is None else found
        return found

    def _fold(self, values: memoryview, row: int) -> None:
        """Fold a dead process's task columns and histogram into the retired row's (its held
        locks are not held any more: its gauges are dropped)."""
        retired, block = self._task_block(RETIRED * WIDTH), self._task_block(row * WIDTH)
        for column in range(values[self._names_at() - 1] * TASK_WIDTH):
            kept = not HELD <= column % TASK_WIDTH < LATE  # the gauges alone are dropped
            values[retired + column] += values[block + column] if kept else 0
            values[block + column] = 0
        hist = self._hist_at()
        for index in range(HIST_WIDTH):
            values[hist + RETIRED * HIST_WIDTH + index] += values[hist + row * HIST_WIDTH + index]
            values[hist + row * HIST_WIDTH + index] = 0

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
