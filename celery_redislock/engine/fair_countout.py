"""Fair share's count-out off the task's path: the tickets of the calls a worker receives are
buffered in the process, and one thread counts them out of their backlogs, one script call per
queue for all that gathered (``FairLanes.started_many``), so a call's start pays no round trip.

A ticket waits at most ``FLUSH_DELAY`` plus a round trip; ``stop()`` (the worker's shutdown)
counts out what is left. A process killed in between loses its buffer: a call given out again
is counted out by its next receipt (its ticket is still queued in Redis), one acknowledged stays
counted until a worker finds its lane empty (``gates.fair_heal``) or ``celery redislock fair
reset``.
"""

from __future__ import annotations

import logging
import threading

from .counting import count
from .fair_lanes import FairLanes
from .leases import REDIS_ERRORS
from .per_process import PerProcess
from .renewal import untraced
from .script_runner import ScriptRunner

__all__ = ["BATCH", "FLUSH_DELAY", "CountOut", "get_countout", "stop_countout"]

logger = logging.getLogger(__name__)

#: Seconds a batch gathers once its first ticket is buffered: more tickets a script call under
#: load, a short window for a kill to lose.
FLUSH_DELAY = 0.05
#: The most tickets one script call counts out (a script runs alone on its server).
BATCH = 500


class CountOut:
    """One process's buffer of received tickets, by (Redis, prefix, queue), and the thread that
    counts them out. The thread starts with the first ticket and runs until ``stop()``."""

    def __init__(self, delay: float | None = None) -> None:
        self._delay = FLUSH_DELAY if delay is None else delay
        self._mutex = threading.Lock()
        self._pending: dict[tuple[int, str, str], tuple[ScriptRunner, str, str, list[str]]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def add(self, runner: ScriptRunner, prefix: str, queue: str, ticket: str) -> None:
        """Buffer ``ticket`` (a call of ``queue`` received) to be counted out soon."""
        where = (id(runner), prefix, queue)
        with self._mutex:
            entry = self._pending.get(where)
            if entry is None:
                entry = self._pending[where] = (runner, prefix, queue, [])
            entry[3].append(ticket)
            start = self._thread is None
            if start:
                self._thread = threading.Thread(target=self._run, name="redislock-fair", daemon=True)
        # Set only when clear: the thread clears it before it takes the buffer, so a ticket
        # added while it is set is in the next batch taken.
        if not self._wake.is_set():
            self._wake.set()
        if start:
            assert self._thread is not None
            self._thread.start()

    def pending(self) -> int:
        """Tickets buffered now."""
        with self._mutex:
            return sum(len(entry[3]) for entry in self._pending.values())

    def flush(self) -> int:
        """Count out every ticket buffered now: one script call per queue (per ``BATCH``);
        returns how many were still counted in. Unreachable Redis: they stay counted (logged)."""
        with self._mutex:
            pending, self._pending = self._pending, {}
        counted = 0
        for runner, prefix, queue, tickets in pending.values():
            lanes = FairLanes(runner, prefix, queue)
            for first in range(0, len(tickets), BATCH):
                chunk = tickets[first : first + BATCH]
                try:
                    counted += lanes.started_many(chunk)
                except REDIS_ERRORS as exc:  # the calls run all the same; their backlog looks longer
                    count("redis_errors")
                    logger.warning(
                        "Could not count %d received call(s) of %s out of their backlog: %r",
                        len(chunk),
                        queue,
                        exc,
                    )
        return counted

    def _run(self) -> None:
        untraced()
        while True:
            self._wake.wait()
            self._wake.clear()
            # Not a synchronisation: the batch gathers for a moment. stop() cuts it short and
            # counts out what is left itself.
            if self._stopping.wait(self._delay):
                return
            self.flush()

    def stop(self, timeout: float = 5.0) -> int:
        """Stop the thread and count out what is buffered (the worker's shutdown)."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return self.flush()


# A forked child starts with none: the parent's thread is not in it, and the parent counts out
# its own buffer.
_countouts: PerProcess[CountOut] = PerProcess(CountOut)
#: This process's count-out (a new one after ``stop_countout`` or a fork).
get_countout = _countouts.get


def stop_countout() -> int:
    """Count out what this process buffered and stop its thread; how many were counted out."""
    countout = _countouts.current()
    return countout.stop() if countout is not None else 0
