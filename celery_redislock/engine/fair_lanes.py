"""Fair share's lanes in Redis: which lane of a queue a tenant's call is queued in, its backlog
counted down once as it starts, and the lanes' state as ``celery redislock fair show`` reads it."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .keys import fair_expiry_key, fair_keys
from .leases import as_text
from .script_runner import ScriptRunner, package_script

__all__ = ["FAIR_ASSIGN", "FAIR_START", "SWEEP", "SWEEP_BATCH", "FairLanes", "LaneState", "hashed_lane"]

# Both scripts count calls out (an expired one at assign) with the functions of fair_count_out.lua.
_COUNT_OUT = package_script(__package__, "fair_count_out.lua")
FAIR_ASSIGN = _COUNT_OUT + package_script(__package__, "fair_assign.lua")
FAIR_START = _COUNT_OUT + package_script(__package__, "fair_start.lua")
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
    calls are queued with a lane assigned."""

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

    def assign(
        self, tenant: str, ticket: str, lanes: int, weight: int = 1, expires_at: float | None = None
    ) -> int:
        """The lane of ``lanes`` the call ``ticket`` of ``tenant`` is queued in, counted in its
        backlog; a ticket queued already keeps its lane and is counted once. ``expires_at`` (Unix
        seconds): when the broker may drop it unseen, after which a sweep counts it out."""
        expiry = "" if expires_at is None else repr(float(expires_at))
        args = (tenant, ticket, str(int(lanes)), str(int(weight)), expiry, str(SWEEP))
        return int(self.runner.run(FAIR_ASSIGN, (*self.keys, self.expiry_key), args))

    def started(self, ticket: str) -> bool:
        """Count the call ``ticket`` out of its backlog as it starts; False when it was not
        counted in (started already, sent while Redis was away, or the keys were flushed)."""
        return self.started_many((ticket,), sweep=0) == 1

    def started_many(self, tickets: Sequence[str], sweep: int = SWEEP) -> int:
        """Count each of ``tickets`` out of its backlog in one script call, and sweep up to
        ``sweep`` expired calls; how many of ``tickets`` were counted in (as ``started``)."""
        if not tickets and sweep <= 0:
            return 0
        reply = self.runner.run(FAIR_START, (*self.keys, self.expiry_key), (str(sweep), *tickets))
        return int(reply[0])

    def sweep(self) -> int:
        """Count out every call whose expiry has passed (a broker may drop them unseen), in script
        calls of ``SWEEP_BATCH``; how many were still queued."""
        swept = 0
        while True:
            reply = self.runner.run(FAIR_START, (*self.keys, self.expiry_key), (str(SWEEP_BATCH),))
            swept += int(reply[1])
            if int(reply[2]) < SWEEP_BATCH:
                return swept

    def state(self) -> LaneState:
        """The lanes' backlogs now: three reads in one pipeline (one round trip; the keys share a
        slot), not one snapshot: for display."""
        load_key, tenants_key, calls_key = self.keys
        pipe = self.runner.client.pipeline(transaction=False)
        pipe.hgetall(load_key)
        pipe.hgetall(tenants_key)
        pipe.hlen(calls_key)
        loads, raw_tenants, queued = pipe.execute()
        load = {int(as_text(lane)): int(n) for lane, n in loads.items()}
        tenants = {
            as_text(tenant): {int(lane): int(n) for lane, n in json.loads(as_text(raw)).items()}
            for tenant, raw in raw_tenants.items()
        }
        return LaneState(load, tenants, int(queued))

    def reset(self) -> bool:
        """Forget every backlog of the queue (its messages stay queued and run; their starts are
        then not counted): for counts a purged queue left behind. True if there were any."""
        return bool(self.runner.client.delete(*self.keys, self.expiry_key))
