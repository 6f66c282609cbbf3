"""The Redis side of the dedup modes (README, "Which call runs"): a throttle's window kept after
its run, keep-latest's latest call, debounce's latest call and burst start. One script call
each, on keys of one cluster slot (``keys.slot_key``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import slot_key
from .leases import Client, as_text
from .scripts import load_script, ttl_arg

__all__ = [
    "DEBOUNCE_CALL",
    "DEBOUNCE_RUN",
    "KEEP_LATEST",
    "THROTTLE_END",
    "LatestReply",
    "ModeEngine",
    "debounce_keys",
    "latest_key",
]

THROTTLE_END = load_script("throttle_end.lua")
KEEP_LATEST = load_script("keep_latest.lua")
DEBOUNCE_CALL = load_script("debounce_call.lua")
DEBOUNCE_RUN = load_script("debounce_run.lua")


def latest_key(key: str) -> str:
    """Where keep_latest records the latest call of lock ``key``, in its cluster slot."""
    return slot_key(key, "latest")


def debounce_keys(key: str) -> list[str]:
    """Where debounce records the latest call of lock ``key`` and its burst's first-call time,
    in its cluster slot."""
    return [slot_key(key, "debounce"), slot_key(key, "burst")]


@dataclass(frozen=True)
class LatestReply:
    """``keep_latest.lua``'s answer: ``"run"``, ``"replaced"`` (``other`` is the task id of the
    latest call) or ``"pending"`` (``other`` holds the lock)."""

    status: str
    other: str


_STATUS = {0: "replaced", 1: "run", 2: "pending"}


class ModeEngine:
    """The mode scripts, registered on the lock engine's client."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._throttle_end = client.register_script(THROTTLE_END)
        self._keep_latest = client.register_script(KEEP_LATEST)
        self._debounce_call = client.register_script(DEBOUNCE_CALL)
        self._debounce_run = client.register_script(DEBOUNCE_RUN)

    def end_throttle(self, key: str, holder: str, keep_as: str, left_ms: int, notify: str) -> Any:
        """Keep ``key`` as ``keep_as`` for the ``left_ms`` left in its window (deleted, and
        published on ``notify``, if none is left) if ``holder`` still has it. Returns 2 kept,
        1 deleted, else the current holder (or None: gone)."""
        left = str(max(0, left_ms))
        reply = self._throttle_end(keys=[key], args=[holder, keep_as, left, notify])
        return reply if isinstance(reply, int) or reply is None else as_text(reply)

    def keep_latest(
        self,
        key: str,
        holder: str,
        ttl_ms: int,
        task_id: str,
        latest_ttl_ms: int,
        *,
        recheck: bool,
        deliveries: str,
    ) -> LatestReply:
        """Record ``task_id`` as the latest call of ``key`` (a ``recheck``: only if it still is)
        and take the lock for ``holder`` if it is free. A lock held by another delivery of this
        very message (a holder id starting with ``deliveries``) leaves the latest call alone."""
        latest_ttl = ttl_arg(latest_ttl_ms)
        args = [holder, ttl_arg(ttl_ms), task_id, latest_ttl, "1" if recheck else "0", deliveries]
        code, other = self._keep_latest(keys=[key, latest_key(key)], args=args)
        return LatestReply(_STATUS[int(code)], as_text(other))

    def debounce_call(self, key: str, task_id: str, delay_ms: int, max_ms: int, ttl_ms: int) -> int:
        """Record ``task_id`` as the latest call of ``key``'s burst; the delay (ms) to send it with."""
        args = [task_id, str(delay_ms), str(max_ms), ttl_arg(ttl_ms)]
        return int(self._debounce_call(keys=debounce_keys(key), args=args))

    def debounce_run(self, key: str, task_id: str) -> str | None:
        """None: ``task_id`` runs (the burst is over); else the task id that superseded it."""
        reply = self._debounce_run(keys=debounce_keys(key), args=[task_id])
        return None if reply == 1 else as_text(reply)
