"""Fair share's lanes in Redis: which lane of a queue a tenant's call is queued in, its backlog
counted down once as it starts, and the lanes' state as ``celery redislock fair show`` reads it."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .decision_record import Record, run_recorded
from .keys import fair_expiry_key, fair_keys, fair_marks_key
from .leases import as_text
from .script_runner import ScriptRunner, package_script

__all__ = [
    "FAIR_ASSIGN",
    "FAIR_HEAL",
    "FAIR_START",
    "STRIDE",
    "SWEEP",
    "SWEEP_BATCH",
    "FairLanes",
    "LaneState",
    "hashed_lane",
]

# Both scripts count calls out (an expired one at assign) with the functions of fair_count_out.lua.
_COUNT_OUT = package_script(__package__, "fair_count_out.lua")
FAIR_ASSIGN = _COUNT_OUT + package_script(__package__, "fair_assign.lua")
FAIR_START = _COUNT_OUT + package_script(__package__, "fair_start.lua")
FAIR_HEAL = _COUNT_OUT + package_script(__package__, "fair_heal.lua")
#: A lane's field in the hashes is lane + STRIDE * its generation (``lua/fair_count_out.lua``).
STRIDE = 1024
#: Expired calls a script call sweeps besides its own work (O(log N) each).
SWEEP = 3
#: Expired calls one script call of a full sweep takes: a script runs alone on its server.
SWEEP_BATCH = 500


def hashed_lane(tenant: str, lanes: int) -> int:
    """The lane a tenant's call goes to when Redis cannot be asked: the same for every sender,
    in every process (a stable hash, not Python's salted one)."""
    return zlib.crc32(tenant.encode("utf-8")) % lanes


@dataclass(frozen=True)
class LaneState:
    """One queue's lanes now: each lane's backlog, each tenant's backlog by lane, and how many
    calls the lanes count queued in all."""

    load: Mapping[int, int] = field(default_factory=dict)
    tenants: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    queued: int = 0

    def backlog(self, tenant: str) -> int:
        return sum(self.tenants.get(tenant, {}).values())

    def share(self, tenant: str) -> float:
        """The part of the starts ``tenant`` gets while the backlogs last: a worker serves the
        lanes that have a backlog in turn, and a lane's calls in their order, so each busy lane
        gives each of its tenants starts in proportion to its calls there."""
        busy = [lane for lane, load in self.load.items() if load > 0]
        if not busy:
            return 0.0
        mine = self.tenants.get(tenant, {})
        return sum(count / self.load[lane] for lane, count in mine.items() if self.load.get(lane)) / len(busy)


class FairLanes:
    """The lanes of one queue (``queue``) under ``prefix``; every change is one script call on
    keys of one cluster slot (``keys.fair_keys``)."""

    def __init__(self, runner: ScriptRunner, prefix: str, queue: str) -> None:
        self.runner = runner
        self.queue = queue
        self.keys = fair_keys(prefix, queue)
        self.expiry_key = fair_expiry_key(prefix, queue)
        self.marks_key = fair_marks_key(prefix, queue)
        self.all_keys = (*self.keys, self.expiry_key, self.marks_key)

    def assign(
        self,
        tenant: str,
        ticket: str,
        lanes: int,
        weight: int = 1,
        expires_at: float | None = None,
        record: Record | None = None,
    ) -> int:
        """The lane of ``lanes`` the call ``ticket`` of ``tenant`` is queued in, counted in its
        backlog; a ticket queued already keeps its lane and is counted once. ``expires_at`` (Unix
        seconds): when the broker may drop it unseen, after which a sweep counts it out.
        ``record``: the lane kept in the call's record too."""
        expiry = "" if expires_at is None else repr(float(expires_at))
        hashed = str(hashed_lane(tenant, int(lanes)))
        args = (tenant, ticket, str(int(lanes)), str(int(weight)), expiry, str(SWEEP), hashed)
        return int(run_recorded(self.runner, FAIR_ASSIGN, self.all_keys, args, record))

    def started(self, ticket: str) -> bool:
        """Count the call ``ticket`` out of its backlog as it starts; False when it was not
        counted in (started already, sent while Redis was away, or the keys were flushed)."""
        return self.started_many((ticket,), sweep=0) == 1

    def started_many(self, tickets: Sequence[str], sweep: int = SWEEP) -> int:
        """Count each of ``tickets`` out of its backlog in one script call, and sweep up to
        ``sweep`` expired calls; how many of ``tickets`` were counted in (as ``started``)."""
        if not tickets and sweep <= 0:
            return 0
        reply = self.runner.run(FAIR_START, self.all_keys, (str(sweep), *tickets))
        return int(reply[0])

    def sweep(self) -> int:
        """Count out every call whose expiry has passed (a broker may drop them unseen), in script
        calls of ``SWEEP_BATCH``; how many were still queued."""
        swept = 0
        while True:
            reply = self.runner.run(FAIR_START, self.all_keys, (str(SWEEP_BATCH),))
            swept += int(reply[1])
            if int(reply[2]) < SWEEP_BATCH:
                return swept

    def last_assigned(self) -> dict[int, str]:
        """The ticket last assigned to each lane that has one (``heal_empty``)."""
        marks = self.runner.client.hgetall(self.marks_key)
        return {int(name[1:]): as_text(ticket) for name, ticket in _texts(marks) if name[0] == "s"}

    def heal_empty(self, lane: int, last: str) -> int:
        """Reset ``lane``'s count (the broker held nothing there at two looks) unless a call was
        assigned to it since ``last`` was the last (``last_assigned``); its count before."""
        return int(self.runner.run(FAIR_HEAL, self.all_keys, (str(lane), "empty", last)))

    def heal_floor(self, lane: int, messages: int) -> int:
        """Count ``lane`` at least ``messages`` busy (the broker holds that many there); its count
        before."""
        return int(self.runner.run(FAIR_HEAL, self.all_keys, (str(lane), "floor", str(messages))))

    def forget_stale(self) -> int:
        """Count out every call counted under a lane's older generation (``heal_empty``: its
        message left the lane long ago): one SCAN of the queued calls, by the worker that healed
        a lane, in script calls of ``SWEEP_BATCH``; how many there were."""
        gens = self._generations()
        stale = []
        for ticket, value in self.runner.client.hscan_iter(self.keys[2], count=SWEEP_BATCH):
            field = int(as_text(value).rsplit("\t", 1)[1])
            if field // STRIDE != gens.get(field % STRIDE, 0):
                stale.append(as_text(ticket))
        for first in range(0, len(stale), SWEEP_BATCH):
            self.started_many(stale[first : first + SWEEP_BATCH], sweep=0)
        return len(stale)

    def loads(self) -> dict[int, int]:
        """Each lane's count now, of its current generation (two reads)."""
        return self._by_lane(self.runner.client.hgetall(self.keys[0]), self._generations())

    def state(self) -> LaneState:
        """The lanes' backlogs now, only what each lane's current generation counts: three reads
        in one pipeline (one round trip; the keys share a slot), not one snapshot: for display."""
        pipe = self.runner.client.pipeline(transaction=False)
        pipe.hgetall(self.keys[0])
        pipe.hgetall(self.keys[1])
        pipe.hgetall(self.marks_key)
        loads, raw_tenants, marks = pipe.execute()
        gens = self._generations(marks)
        tenants = {}
        for tenant, raw in _texts(raw_tenants):
            mine = self._by_lane(json.loads(raw), gens)
            if mine:
                tenants[tenant] = mine
        load = self._by_lane(loads, gens)
        return LaneState(load, tenants, sum(load.values()))

    def _generations(self, marks: Mapping[Any, Any] | None = None) -> dict[int, int]:
        if marks is None:
            marks = self.runner.client.hgetall(self.marks_key)
        return {int(name[1:]): int(gen) for name, gen in _texts(marks) if name[0] == "g"}

    @staticmethod
    def _by_lane(counts: Mapping[Any, Any], gens: Mapping[int, int]) -> dict[int, int]:
        found = {}
        for name, n in counts.items():
            number = int(as_text(name))
            if number // STRIDE == gens.get(number % STRIDE, 0):
                found[number % STRIDE] = int(n)
        return found

    def reset(self) -> bool:
        """Forget every backlog of the queue (its messages stay queued and run; their starts are
        then not counted): for counts a purged queue left behind. True if there were any."""
        return bool(self.runner.client.delete(*self.all_keys))


def _texts(pairs: Mapping[Any, Any]) -> Iterator[tuple[str, str]]:
    return ((as_text(name), as_text(value)) for name, value in pairs.items())
