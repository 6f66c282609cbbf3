"""The workers' lock counters over time, for the web page: polled with ``inspect redislock_stats``
by a thread of the web process, kept as a bounded history in its memory, drawn as small charts."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .display import LatenessRow, lateness_rows

__all__ = ["ALL_TASKS", "CHARTED", "Chart", "CounterHistory", "StatsPoller"]

logger = logging.getLogger(__name__)

#: The row of a worker whose reply has no per-task breakdown: its totals over every task.
ALL_TASKS = "(all tasks)"

#: The counters charted, in this order, where the workers report them.
CHARTED = ("acquired", "skipped", "retried", "waited", "rate_limited", "lost")

#: A colour per charted counter (the legend names them).
_COLOURS = ("#2b7bb9", "#e08a00", "#7a52a8", "#3b9a3b", "#c0392b", "#111111")

Totals = dict[str, dict[str, int]]  # task -> counter -> count


def totals_of(replies: Sequence[Mapping[str, Any]]) -> Totals:
    """Per-task counters summed over the workers' ``redislock_stats`` replies: a reply's
    ``tasks`` breakdown, or its worker totals (``counters``) under ``ALL_TASKS`` without one."""
    totals: Totals = {}
    for reply in replies:
        tasks = reply.get("tasks")
        if not isinstance(tasks, Mapping):
            tasks = {ALL_TASKS: reply.get("counters") or {}}
        for task, counts in tasks.items():
            row = totals.setdefault(str(task), {})
            for name, value in (counts or {}).items():
                if isinstance(value, int):
                    row[str(name)] = row.get(str(name), 0) + value
    return totals


@dataclass(frozen=True)
class Chart:
    """One task's charted counters: per counter its colour, the SVG polyline's points (the
    increase per poll, scaled to the chart, placed by the poll's time), and its total at the
    last poll. ``start``, ``end``: the first and last poll's times (Unix seconds), the time
    axis's ends; ``restarts``: when a total went down (a worker restarted and counts from 0
    again), each with its x on the chart."""

    task: str
    lines: list[tuple[str, str, str, int]]  # counter, colour, points, last total
    peak: int
    width: int
    height: int
    start: float = 0.0
    end: float = 0.0
    restarts: tuple[tuple[float, float], ...] = ()


class CounterHistory:
    """The last ``size`` polls' totals; thread-safe (the poller adds, the page reads)."""

    def __init__(self, size: int = 120) -> None:
        self._samples: deque[tuple[float, Totals]] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, when: float, totals: Totals) -> None:
        with self._lock:
            self._samples.append((when, totals))

    def samples(self) -> list[tuple[float, Totals]]:
        with self._lock:
            return list(self._samples)

    def charts(self, task: str | None = None, width: int = 480, height: int = 120) -> list[Chart]:
        """A chart per task (only ``task``'s and the worker totals when given): each counter's
        increase between two polls, over the polls' times; a worker restart (a total going
        down) counts as no increase, and is marked where it was seen."""
        samples = self.samples()
        names = sorted({name for _, totals in samples for name in totals})
        times = [when for when, _ in samples]
        charts = []
        for name in names:
            if task is not None and name not in (task, ALL_TASKS):
                continue
            rows = [totals.get(name, {}) for _, totals in samples]
            series = []
            went_down: set[int] = set()
            for counter, colour in zip(CHARTED, _COLOURS):
                if not any(counter in row for row in rows):
                    continue
                values = [row.get(counter, 0) for row in rows]
                steps = [max(0, b - a) for a, b in zip(values, values[1:])]
                went_down.update(i + 1 for i, (a, b) in enumerate(zip(values, values[1:])) if b < a)
                series.append((counter, colour, steps, values[-1]))
            if not series:
                continue
            peak = max([1, *(step for _, _, steps, _ in series for step in steps)])
            lines = [
                (counter, colour, _points(times, steps, peak, width, height), last)
                for counter, colour, steps, last in series
            ]
            restarts = tuple((times[i], _x(times, times[i], width)) for i in sorted(went_down))
            charts.append(Chart(name, lines, peak, width, height, times[0], times[-1], restarts))
        return charts


def _x(times: list[float], when: float, width: int) -> float:
    """Where ``when`` falls on a chart whose axis runs from the first of ``times`` to the last."""
    span = times[-1] - times[0]
    return width * (when - times[0]) / span if span > 0 else 0.0


def _points(times: list[float], steps: list[int], peak: int, width: int, height: int) -> str:
    """Each step (the increase up to a poll) at that poll's time; one poll or one step: a level line."""
    if len(steps) < 2:
        level = height - (steps[0] if steps else 0) * height / peak
        return f"0.0,{level:.1f} {width:.1f},{level:.1f}"
    return " ".join(
        f"{_x(times, when, width):.1f},{height - step * height / peak:.1f}"
        for when, step in zip(times[1:], steps)
    )


class StatsPoller:
    """Asks every worker for its counters each ``interval`` seconds, into ``history``; a named
    thread that stops on an Event (``stop``)."""

    def __init__(self, app: Any, history: CounterHistory, interval: float, timeout: float = 2.0) -> None:
        self.app = app
        self.history = history
        self.interval = interval
        self.timeout = min(timeout, interval)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._failing = False
        #: How late the postponed calls started, by the last poll's answers.
        self.lateness: list[LatenessRow] = []

    def start(self) -> None:
        """Start polling, once (the page calls it on every view: it starts on the first)."""
        with self._start_lock:
            if self._thread is None and not self._stopped.is_set():
                # A daemon: a host app mounting the page need not stop it; `web` does, on exit.
                self._thread = threading.Thread(target=self._run, name="redislock-web-stats", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.timeout + 5)

    def poll(self) -> None:
        """One poll: every worker that answers within the timeout."""
        replies = self.app.control.broadcast("redislock_stats", reply=True, timeout=self.timeout)
        answers = [answer for reply in replies or [] for answer in reply.values() if isinstance(answer, dict)]
        self.history.add(time.time(), totals_of(answers))
        self.lateness = lateness_rows(answers)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.poll()
                if self._failing:
                    logger.info("redislock web: the workers' counters can be read again")
                self._failing = False
            except Exception as exc:  # the broker down: the page keeps its history and tries again
                if not self._failing:
                    logger.warning("redislock web: cannot read the workers' counters: %s", exc)
                self._failing = True
            self._stopped.wait(self.interval)
