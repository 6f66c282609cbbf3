"""The operator's holds of an app in Redis: one hash (``keys.holds_key``) of hold id -> its end by
the server's clock (or until lifted), set, lifted and read by one script (``lua/holds.lua``), so
every worker and every operator's command sees the same holds. A hold names a task, and may name
argument values (``(("tenant", "acme"),)``): then it holds only the calls with those values. What a
hold means to a call is the hold gate's (``gates.task_holds``); checking what an operator asks for
is ``ops.holds``'s.

A worker reads them by ``peek_holds`` (no script: HGETALL, and the server's TIME when a hold is
timed), so its reads in the background, once a second per process, write nothing, run no script
and leave a hold that ended for the next ``set``, ``lift`` or ``read`` to delete."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .keys import holds_key
from .leases import Client
from .script_runner import ScriptRunner, package_script
from .timing import server_time, to_ms, to_seconds

__all__ = ["HOLDS", "Hold", "HoldKey", "hold_id", "lift_hold", "peek_holds", "read_holds", "set_hold"]

HOLDS = package_script(__package__, "holds.lua")

#: The argument values a hold names, ``(name, value as text)`` sorted by name; ``()``: every call.
HoldKey = tuple[tuple[str, str], ...]

#: The script's "no hold there" and "until lifted".
_NONE = -2
_UNTIL_LIFTED = -1


@dataclass(frozen=True)
class Hold:
    """A hold in force: on ``task``'s calls whose arguments have the values of ``key`` (all of
    them when empty), for ``left`` seconds more (None: until lifted)."""

    task: str
    key: HoldKey
    left: float | None

    def key_text(self) -> str:
        """``tenant=acme`` (pairs joined by a space), or "" for every call."""
        return " ".join(f"{name}={value}" for name, value in self.key)


def hold_id(task: str, key: HoldKey) -> str:
    """The hash field of a hold: JSON ``[task, [[name, value], ...]]`` (one text per hold)."""
    return json.dumps([task, [list(pair) for pair in sorted(key)]], ensure_ascii=False)


def _parse_id(text: str | bytes) -> tuple[str, HoldKey] | None:
    """A field ``hold_id`` wrote, else None (a field written by hand is left out, not fatal)."""
    try:
        task, pairs = json.loads(text)
        key = tuple((str(name), str(value)) for name, value in pairs)
    except (ValueError, TypeError):
        return None
    return (task, key) if isinstance(task, str) else None


def _left(ms: int) -> float | None:
    return None if ms == _UNTIL_LIFTED else to_seconds(ms)


def _was(task: str, key: HoldKey, reply: Any) -> Hold | None:
    ms = int(reply)
    return None if ms == _NONE else Hold(task, key, _left(ms))


def set_hold(
    scripts: ScriptRunner, prefix: str, task: str, key: HoldKey, seconds: float | None
) -> Hold | None:
    """Hold ``task``'s calls of ``key`` for ``seconds`` from now by the server's clock (None:
    until lifted), replacing a hold of the same task and key; returns the hold it replaced, or
    None. The caller has checked ``seconds`` (> 0)."""
    length = 0 if seconds is None else to_ms(seconds)
    reply = scripts.run(HOLDS, [holds_key(prefix)], ["set", hold_id(task, key), str(length)])
    return _was(task, key, reply)


def lift_hold(scripts: ScriptRunner, prefix: str, task: str, key: HoldKey) -> Hold | None:
    """Lift the hold of ``task`` and ``key`` now; returns it as it was, or None: there was none."""
    return _was(task, key, scripts.run(HOLDS, [holds_key(prefix)], ["lift", hold_id(task, key), "0"]))


def read_holds(scripts: ScriptRunner, prefix: str) -> list[Hold]:
    """The holds in force, by task then key (those over are deleted as they are met)."""
    reply: list[Any] = scripts.run(HOLDS, [holds_key(prefix)], ["read"])
    holds = []
    for index in range(0, len(reply), 2):
        parsed = _parse_id(reply[index])
        if parsed is not None:
            holds.append(Hold(parsed[0], parsed[1], _left(int(reply[index + 1]))))
    return _in_order(holds)


def peek_holds(client: Client, prefix: str) -> list[Hold]:
    """The holds in force as ``read_holds`` returns them, read without a script and without
    writing: the hash, and the server's clock only when a hold in it is timed."""
    stored: dict[Any, Any] = client.hgetall(holds_key(prefix))
    now_ms = None
    holds = []
    for field, value in stored.items():
        parsed = _parse_id(field)
        try:
            ends = int(value)
        except ValueError:  # a value written by hand is left out, as a field is
            continue
        if parsed is None:
            continue
        if ends == 0:
            holds.append(Hold(parsed[0], parsed[1], None))
            continue
        if now_ms is None:
            now_ms = to_ms(server_time(client))
        if ends > now_ms:
            holds.append(Hold(parsed[0], parsed[1], to_seconds(ends - now_ms)))
    return _in_order(holds)


def _in_order(holds: list[Hold]) -> list[Hold]:
    return sorted(holds, key=lambda hold: (hold.task, hold.key))
