"""The Redis side of the dedup modes (README, "Which call runs"): a throttle's window kept after
its run. One script call each; keys of one slot (cluster-safe)."""

from __future__ import annotations

from typing import Any

from .leases import Client, as_text
from .scripts import load_script

__all__ = ["THROTTLE_END", "ModeEngine"]

THROTTLE_END = load_script("throttle_end.lua")


class ModeEngine:
    """The mode scripts, registered on the lock engine's client."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._throttle_end = client.register_script(THROTTLE_END)

    def end_throttle(self, key: str, holder: str, keep_as: str, left_ms: int, notify: str) -> Any:
        """Keep ``key`` as ``keep_as`` for the ``left_ms`` left in its window (deleted, and
        published on ``notify``, if none is left) if ``holder`` still has it. Returns 2 kept,
        1 deleted, else the current holder (or None: gone)."""
        left = str(max(0, left_ms))
        reply = self._throttle_end(keys=[key], args=[holder, keep_as, left, notify])
        return reply if isinstance(reply, int) or reply is None else as_text(reply)
