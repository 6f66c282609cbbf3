"""Fair share's lane counts set right by what the broker holds: a thread of each worker's main
process looks, every ``HEAL_INTERVAL``, at the lanes the worker consumes (a passive declare of
each) and at what the lock Redis counts there, so counts a flush lost or a restored snapshot
brought back heal by themselves.

- A lane counted busy that was empty in the broker at two looks in a row, with no call assigned
  to it in between, is reset (``FairLanes.heal_empty``: a new generation of the lane, O(1)); the
  calls counted under the old one are then counted out (``forget_stale``).
- A lane holding more messages than it is counted is counted that busy (``heal_floor``): calls
  sent while the counts were lost (a flush, a restart without data) are counted nowhere else.

Off the send path and the task's: only workers look, each look two reads of the lock Redis per
queue, one passive declare per lane, and a script call only for a lane whose count it changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from ..engine.counting import count
from ..engine.fair_lanes import FairLanes
from ..engine.leases import REDIS_ERRORS
from ..engine.renewal import untraced
from ..integration.queue_sizes import queue_sizes
from ..integration.queues import LANE_MARK, lane_name
from ..integration.runtime import runtime_for

__all__ = ["HEAL_INTERVAL", "LaneHealer", "consumed_lanes"]

logger = logging.getLogger(__name__)

#: Seconds between two looks: a lane empty at two looks this far apart, with nothing assigned to
#: it meanwhile, holds none of the calls counted there (each was published or counted out since).
HEAL_INTERVAL = 30.0


def consumed_lanes(names: Any) -> dict[str, list[int]]:
    """The lanes among the queue ``names`` a worker consumes, by their queue."""
    found: dict[str, list[int]] = {}
    for name in names:
        queue, mark, lane = str(name).rpartition(LANE_MARK)
        if mark and queue and lane.isdigit():
            found.setdefault(queue, []).append(int(lane))
    return {queue: sorted(lanes) for queue, lanes in found.items()}


class LaneHealer:
    """Looks at ``lanes`` (queue -> lane numbers) of ``app``'s broker and lock Redis."""

    def __init__(self, app: Any, lanes: Mapping[str, list[int]], interval: float | None = None) -> None:
        self.app = app
        self.lanes = dict(lanes)
        self.interval = HEAL_INTERVAL if interval is None else interval
        # (queue, lane) -> the ticket last assigned to it, read before a look found it empty.
        self._empty: dict[tuple[str, int], str] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._told = False

    def look(self) -> int:
        """One look at every lane; how many lanes' counts it changed."""
        runtime = runtime_for(self.app)
        changed = 0
        for queue, numbers in self.lanes.items():
            fair = FairLanes(runtime.scripts, runtime.settings.key_prefix, queue)
            last = fair.last_assigned()  # before the broker's answer: see heal_empty
            loads = fair.loads()
            sizes = queue_sizes(self.app, [lane_name(queue, lane) for lane in numbers])
            healed = False
            for lane in numbers:
                # A lane the worker consumes missing from the broker holds nothing: a Redis
                # broker keeps no key for an empty queue.
                size, load = sizes.get(lane_name(queue, lane), 0), loads.get(lane, 0)
                seen_before = self._empty.pop((queue, lane), None)
                if size > load and fair.heal_floor(lane, size) < size:
                    changed += 1
                    count("fair_healed")
                    logger.info(
                        "Lane %s holds %d call(s), counted %d: counted %d",
                        lane_name(queue, lane),
                        size,
                        load,
                        size,
                    )
                elif size == 0 and load > 0:
                    if seen_before is not None and fair.heal_empty(lane, seen_before) > 0:
                        changed += 1
                        healed = True
                        count("fair_healed")
                        logger.info(
                            "Lane %s is empty, counted %d: its count reset", lane_name(queue, lane), load
                        )
                    else:
                        self._empty[(queue, lane)] = last.get(lane, "")
            if healed:
                fair.forget_stale()
        return changed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="redislock-fair-heal", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        untraced()
        while not self._stopping.wait(self.interval):
            try:
                self.look()
                self._told = False
            except Exception as exc:  # the broker or the lock Redis away: the next look tries again
                if isinstance(exc, REDIS_ERRORS):
                    count("redis_errors")
                if not self._told:
                    self._told = True
                    logger.warning("Could not look at the fair-share lanes' counts: %r", exc)


_healers: list[LaneHealer] = []


@worker_ready.connect(weak=False)
def _start(sender: Any = None, **_: Any) -> None:
    """The worker consumes its queues: look at the lanes among them from now on."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    lanes = consumed_lanes(app.amqp.queues.consume_from)
    if lanes:
        healer = LaneHealer(app, lanes)
        _healers.append(healer)
        healer.start()


@worker_shutdown.connect(weak=False)
def _stop(**_: Any) -> None:
    while _healers:
        _healers.pop().stop()
