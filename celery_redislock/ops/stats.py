"""Counters of lock events, shared by a worker's forked processes, read by `inspect redislock_stats`."""

from __future__ import annotations

import bisect
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from celery import signals

from ..engine.counting import MAX_COUNTERS, POSITIONS, add_count_listener, counter_names, not_registered
from ..engine.lateness import add_lateness_listener, bucket_of, lateness_kinds
from ..engine.leases import Lease
from ..engine.renewal import add_cycle_listener, task_of_key
from ..engine.timing import to_us, us_seconds
from ..integration.liveness import process_alive
from .shared_table import (
    BASELINE,
    HELD,
    HIST_WIDTH,
    LATE,
    LATE_WIDTH,
    LATENCY_BUCKETS,
    MAX_TASKS,
    RETIRED,
    ROWS,
    SINCE,
    TASK_WIDTH,
    WIDTH,
    SharedTable,
)

__all__ = ["LATENCY_BUCKETS", "MAX_TASKS", "ROWS", "Counters", "counters"]

logger = logging.getLogger(__name__)


class Counters(SharedTable):
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
            return functools.partial(self._add_retired, RETIRED * WIDTH + 1 + index)
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
            baseline = values[BASELINE * WIDTH + 1 : (BASELINE + 1) * WIDTH]
            return {name: totals[i] - baseline[i] for i, name in enumerate(names)}

    def by_task(self) -> dict[str, dict[str, int]]:
        """Each task's counters (every registered one, in registration order), for the tasks
        counted since the table was mapped, over every process sharing."""
        names = counter_names()
        with self._exclusive() as values:
            rows = self._rows_counted(values)
            tasks: dict[str, dict[str, int]] = {}
            for slot, task in enumerate(self._slot_names(values)):
                column = slot * TASK_WIDTH
                base = self._task_block(BASELINE * WIDTH) + column
                totals = [-values[base + i] for i in range(len(names))]
                for row in rows:
                    start = self._task_block(row * WIDTH) + column
                    for i, value in enumerate(values[start : start + len(names)]):
                        totals[i] += value
                tasks[task] = dict(zip(names, totals))
            return tasks

    def held(self) -> dict[str, tuple[int, int]]:
        """Per task: ``(locks held, since when the oldest is held, in Unix seconds)`` by the live
        processes sharing, as their renewal threads last wrote them (once a renewal interval)."""
        with self._exclusive() as values:
            pids = [(row, values[row * WIDTH]) for row in self._rows_counted(values)[1:]]
            live = [row for row, pid in pids if pid == os.getpid() or process_alive(pid)]
            held: dict[str, tuple[int, int]] = {}
            for slot, task in enumerate(self._slot_names(values)):
                count, since = 0, 0
                for row in live:
                    start = self._task_block(row * WIDTH) + slot * TASK_WIDTH
                    count += values[start + HELD]
                    oldest = values[start + SINCE]
                    since = oldest if oldest and (not since or oldest < since) else since
                if count:
                    held[task] = (count, since)
            return held

    def latencies(self) -> tuple[list[int], int, float]:
        """The renewal latency histogram over every process sharing: the count of each bucket of
        ``LATENCY_BUCKETS`` (not cumulative, +Inf last), the count, and the sum in seconds."""
        with self._exclusive() as values:
            totals = [0] * HIST_WIDTH
            for row in self._rows_counted(values):
                start = self._hist_at() + row * HIST_WIDTH
                for i, value in enumerate(values[start : start + HIST_WIDTH]):
                    totals[i] += value
        return totals[:-2], totals[-2], us_seconds(totals[-1])

    def late(self, kind: str, task: str, seconds: float) -> None:
        """A postponed call of ``task`` started ``seconds`` after its wait of ``kind`` ended
        (one of ``engine.lateness.lateness_kinds``): into this process's row, no lock shared with others."""
        kinds = lateness_kinds()
        at = self._task_at.get(task)
        if at is None:
            at = self._task_slot(task)
        if at < 0 or kind not in kinds:
            return
        values = self._values
        assert values is not None
        start = at + LATE + kinds.index(kind) * LATE_WIDTH
        with self._lock:
            values[start + bucket_of(seconds)] += 1
            values[start + LATE_WIDTH - 2] += 1
            values[start + LATE_WIDTH - 1] += to_us(seconds)

    def lateness(self) -> dict[tuple[str, str], tuple[list[int], int, float]]:
        """Per ``(task, kind)`` measured: the lateness histogram over every process sharing, as
        ``latencies`` gives the renewals': each bucket's count (+Inf last), the count, the sum."""
        found: dict[tuple[str, str], tuple[list[int], int, float]] = {}
        with self._exclusive() as values:
            rows = self._rows_counted(values)
            for slot, task in enumerate(self._slot_names(values)):
                for index, kind in enumerate(lateness_kinds()):
                    column = slot * TASK_WIDTH + LATE + index * LATE_WIDTH
                    totals = [0] * LATE_WIDTH
                    for row in rows:
                        start = self._task_block(row * WIDTH) + column
                        for i, value in enumerate(values[start : start + LATE_WIDTH]):
                            totals[i] += value
                    if totals[-2]:
                        found[task, kind] = (totals[:-2], totals[-2], us_seconds(totals[-1]))
        return found

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
        hist = self._hist_at() + row // WIDTH * HIST_WIDTH
        with self._lock:
            for at in self._task_at.values():  # the gauges of the last cycle are replaced
                if at >= 0:
                    values[at + HELD] = values[at + SINCE] = 0
            for at, since in places:
                if at >= 0:
                    values[at + HELD] += 1
                    oldest = values[at + SINCE]
                    values[at + SINCE] = int(since) if not oldest else min(oldest, int(since))
            for seconds in latencies:
                values[hist + bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
                values[hist + HIST_WIDTH - 2] += 1
                values[hist + HIST_WIDTH - 1] += to_us(seconds)

    def reset(self) -> None:
        # The baseline moves to the totals: no process's row is written by another, so an
        # increment running meanwhile is never lost or resurrected.
        with self._exclusive() as values:
            for index, total in enumerate(self._totals(values, MAX_COUNTERS)):
                values[BASELINE * WIDTH + 1 + index] = total
            rows = self._rows_counted(values)
            baseline = self._task_block(BASELINE * WIDTH)
            for slot in range(values[self._names_at() - 1]):
                for index in range(MAX_COUNTERS):
                    column = slot * TASK_WIDTH + index
                    values[baseline + column] = sum(
                        values[self._task_block(r * WIDTH) + column] for r in rows
                    )


counters = Counters()
# Every count of the engine and the Celery glue lands here.
add_count_listener(counters.incr, counters.adder)
add_lateness_listener(counters.late)


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
