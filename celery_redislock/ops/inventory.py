"""What the dedup modes keep in Redis beside the locks, for ``celery redislock list``: the
lock key's ``latest`` (keep_latest's latest call), ``debounce`` (debounce's latest call) and
``burst`` (when the debounced burst's first call came, server ms), named by ``keys.slot_key``. A
throttle's window is the lock key itself, held by ``{task id}@throttled``: listed as a lock."""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.keys import parse_key, slot_key, slot_key_owner
from ..engine.leases import as_text
from ..integration.runtime import Runtime

__all__ = ["MODE_SUFFIXES", "mode_keys"]

#: Suffix -> how a row describes the key's value.
MODE_SUFFIXES = {
    "latest": "keep_latest: latest call {}",
    "debounce": "debounce: latest call {}",
    "burst": "debounce: burst began at {} (server ms)",
}

#: Keys per SCAN step and per pipeline.
BATCH = 1000


def mode_keys(runtime: Runtime, pattern: str, task: str | None) -> Iterator[tuple[str, str, str, int]]:
    """``(key, task, description, PTTL ms)`` of each mode key of the app (of ``task`` if given);
    ``pattern`` is the glob of the lock keys (``prefix:*`` or ``prefix:task:*``)."""
    prefix = runtime.settings.key_prefix
    batch: list[tuple[str, str, str]] = []
    # The glob of the lock keys named as slot_key names a key beside them: a prefix with a hash
    # tag keeps it (``{t}:*:*``), one without is wrapped (``{prefix:*}:*``).
    for raw in runtime.engine.scan(slot_key(pattern, "*"), BATCH):
        key = as_text(raw)
        owner = slot_key_owner(key)
        if owner is None or owner[1] not in MODE_SUFFIXES:  # a lock, a semaphore's queue, ...
            continue
        lock_key, suffix = owner
        try:
            key_prefix, key_task, _ = parse_key(lock_key)
        except ValueError:
            continue
        if key_prefix == prefix and (task is None or key_task == task):
            batch.append((key, key_task, suffix))
        if len(batch) >= BATCH:
            yield from _described(runtime, batch)
            batch = []
    yield from _described(runtime, batch)


def _described(runtime: Runtime, batch: list[tuple[str, str, str]]) -> Iterator[tuple[str, str, str, int]]:
    if not batch:
        return
    for (key, key_task, suffix), info in zip(batch, runtime.engine.inspect([k for k, _, _ in batch])):
        if info.holder is not None:
            yield key, key_task, MODE_SUFFIXES[suffix].format(info.holder), info.ttl_ms
