"""The engine's Lua scripts, read once per process, and the batched renewal's shape: batches cut
into chunks (how they are sent is ``script_runner``'s)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .leases import Lease, RenewReport, as_text
from .script_runner import package_script

__all__ = [
    "ACQUIRE",
    "RELEASE",
    "RELEASE_BY_OPERATOR",
    "RELEASE_EXACT",
    "RENEW",
    "RENEW_CHUNK",
    "SEM_ACQUIRE",
    "SEM_RELEASE",
    "SEM_RENEW",
    "SEM_STATE",
    "TRANSFER",
    "BatchRenewal",
    "chunks",
    "flatten",
    "load_script",
    "renew_report",
    "ttl_arg",
    "ttl_bytes",
]


def load_script(name: str) -> str:
    return package_script(__package__, name)


# Read once per process; run by ``ScriptRunner.run`` (EVALSHA, EVAL after NOSCRIPT).
ACQUIRE = load_script("acquire.lua")
RELEASE = load_script("release.lua")
RELEASE_EXACT = load_script("release_exact.lua")
RELEASE_BY_OPERATOR = load_script("release_by_operator.lua")
RENEW = load_script("renew.lua")
TRANSFER = load_script("transfer.lua")
SEM_ACQUIRE = load_script("sem_acquire.lua")
SEM_RELEASE = load_script("sem_release.lua")
SEM_RENEW = load_script("sem_renew.lua")
SEM_STATE = load_script("sem_state.lua")


class BatchRenewal:
    """Renewal of many leases in as few script calls as the topology allows: one for a single
    Redis. Subclasses say how one batch is renewed; a cluster engine also overrides
    ``_partition`` to split the leases by node or slot, so callers of renew_many never change."""

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport:
        """Renew every lease, one script call per partition (one in all for a single Redis).

        A lease that is gone is taken back where that is free; one held by someone else is
        reported.
        """
        report = RenewReport()
        for batch in self._partition(leases):
            if batch:
                report.merge(self._renew_batch(batch))
        return report

    def _partition(self, leases: Iterable[Lease]) -> Iterator[Sequence[Lease]]:
        yield list(leases)

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        raise NotImplementedError


#: Leases per renewal script call. A script holds Redis for as long as it runs (2 to 3 µs a
#: lock, measured in docs/benchmarks.md), so a batch is cut into calls of at most this many,
#: pipelined in one round trip: other clients are served between two calls.
RENEW_CHUNK = 500


def chunks(batch: Sequence[Lease], size: int = RENEW_CHUNK) -> list[Sequence[Lease]]:
    """``batch`` cut into runs of at most ``size`` leases, in order."""
    return [batch[start : start + size] for start in range(0, len(batch), size)]


def renew_report(batch: Sequence[Lease], replies: Any) -> RenewReport:
    report = RenewReport()
    for lease, reply in zip(batch, replies):
        if reply == 1:
            report.renewed.append(lease)
        elif reply == 2:
            report.retaken.append(lease)
        elif reply == 3:
            report.released.append(lease)
        else:
            report.stolen.append((lease, as_text(reply)))
    return report


def flatten(replies: Sequence[Any]) -> list[Any]:
    """The per-lease replies of several renewal calls, in order."""
    return [reply for call in replies for reply in call]


def ttl_arg(ttl_ms: int) -> str:
    if ttl_ms <= 0:
        raise ValueError(f"lock TTL must be a positive number of milliseconds, got {ttl_ms}")
    return str(int(ttl_ms))


@functools.lru_cache(maxsize=256)
def ttl_bytes(ttl_ms: int) -> bytes:
    """``ttl_arg`` as the bytes sent, made once per TTL (``script_runner.NX`` says why)."""
    return ttl_arg(ttl_ms).encode()
