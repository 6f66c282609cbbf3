"""``lock=False``: the options that only mean something for a call that takes its lock, refused
with it (the error names both), and left out when given in a broader layer than it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .mode_rules import Clash
from .schema import spec_of

__all__ = ["LOCK_ONLY", "add_lock_only", "drop_broader", "unlocked_clash"]

#: Option -> why it needs the lock. The lock's own here; each mode's as it registers
#: (``integration.mode.register``): a mode is a way of holding the lock.
LOCK_ONLY: dict[str, str] = {
    "lock_key": "it names what the lock is taken on",
    "on_duplicate": "without a lock no call is a duplicate",
    "acquire_timeout": "it bounds a wait for the lock",
    "release_on_retry": "it says what a retry does with the lock",
    "lock_on": "it says when the lock is taken",
    "queued_timeout": "it is the TTL of a lock taken at enqueue",
    "max_concurrency": "it counts the holders of one key",
    "fencing": "a fencing token is issued with the lock",
    "skip_result": "it is what a call the lock refused stores",
}


def add_lock_only(reasons: Mapping[str, str]) -> None:
    """Refuse these options (name -> why it needs the lock) with ``lock=False``."""
    LOCK_ONLY.update(reasons)


def unlocked_clash(options: Mapping[str, Any]) -> Clash | None:
    """With ``lock=False`` in ``options``: the first option that needs the lock given a value
    other than its default (a merged layer holds every default), else None."""
    if options.get("lock") is not False:
        return None
    for name, why in LOCK_ONLY.items():
        value = options.get(name)
        spec = spec_of(name)
        if value is None or spec is None or value == spec.default:
            continue
        shown = f"{value!r} " if isinstance(value, (bool, str)) else ""
        return name, f"{shown}cannot be used with lock=False ({why})", "lock"
    return None


def drop_broader(merged: dict[str, Any], origin: Mapping[str, str], sources: list[str]) -> None:
    """``merged`` (the layers merged, each value's layer in ``origin``; ``sources``: the layers,
    most specific first) with ``lock=False`` wins over the options needing the lock that a
    broader layer set (an app-wide ``on_duplicate`` is meant for the tasks that lock): they are
    left out of it. Set where ``lock=False`` is, or more specifically, they clash."""
    if merged.get("lock") is not False:
        return
    rank = sources.index(origin["lock"])
    for name in [name for name in merged if name in LOCK_ONLY]:
        if sources.index(origin[name]) > rank:
            del merged[name]
