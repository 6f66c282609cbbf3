"""What the modes and gates keep in Redis beside the locks, for ``celery redislock list``: the
keys each registered one names by ``keys.slot_key`` beside a lock or partition key (its
``key_suffixes``), each described by its owner (``describe_key``); and the keys an owner keeps
apart from any lock key (``other_keys``: a named limit's partitions), described the same way. A
key that no mode or gate names (a lock, a semaphore's queue) is not listed here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Union

from ..engine.keys import slot_key, slot_key_owner
from ..engine.leases import as_text
from ..gates import registered_gates
from ..integration.mode import Gate, Mode
from ..integration.runtime import Runtime
from ..modes import registered
from .listing import task_of

__all__ = ["mode_keys"]

Owner = Union[Mode, Gate]


def mode_keys(
    runtime: Runtime, pattern: str, task: str | None, skip: str = ""
) -> Iterator[tuple[str, str, str, int]]:
    """``(key, task, description, PTTL ms)`` of each mode key of the app (of ``task`` if given);
    ``pattern`` is the glob of the lock keys (``prefix:*`` or ``prefix:task:*``). Keys starting
    with ``skip`` (when given) are left out before they are read or described."""
    prefix = runtime.settings.key_prefix
    known: tuple[Owner, ...] = (*registered(), *registered_gates())
    owners = {suffix: owner for owner in known for suffix in owner.key_suffixes}
    # The glob of the lock keys named as slot_key names a key beside them: a prefix with a hash
    # tag keeps it (``{t}:*:*``), one without is wrapped (``{prefix:*}:*``).
    for found in runtime.engine.scan_batches(slot_key(pattern, "*")):
        batch: list[tuple[str, str, str]] = []
        for raw in found:
            key = as_text(raw)
            if skip and key.startswith(skip):
                continue
            owner = slot_key_owner(key)
            if owner is None or owner[1] not in owners:
                continue  # a lock, a semaphore's queue, ...
            key_task = task_of(owner[0], prefix, task)
            if key_task is not None:
                batch.append((key, key_task, owner[1]))
        if not batch:
            continue
        for (key, key_task, suffix), info in zip(batch, runtime.engine.inspect([k for k, _, _ in batch])):
            text = owners[suffix].describe_key(runtime, key, key_task, suffix, info.holder)
            if text is not None:
                yield key, key_task, text, info.ttl_ms
    # Keys an owner keeps apart from any lock key (a named limit shared by tasks): it finds them.
    for finder_owner in known:
        finder = getattr(finder_owner, "other_keys", None)
        if finder is None:
            continue
        rows = [row for row in finder(runtime, task) if not (skip and row[0].startswith(skip))]
        for (key, key_task, suffix), info in zip(rows, runtime.engine.inspect([k for k, _, _ in rows])):
            text = finder_owner.describe_key(runtime, key, key_task, suffix, info.holder)
            if text is not None:
                yield key, key_task, text, info.ttl_ms
