"""What the dedup modes keep in Redis beside the locks, for ``celery redislock list``:
``{lock key}:latest`` (keep_latest's latest call), ``{lock key}:debounce`` (debounce's latest
call) and ``{lock key}:burst`` (when the debounced burst's first call came, server ms). A
throttle's window is the lock key itself, held by ``{task id}@throttled``: listed as a lock."""

from __future__ import annotations

from collections.abc import Iterator

from .core.leases import as_text
from .keys import parse_key
from .runtime import Runtime

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
    for raw in runtime.engine.scan("{" + pattern + "}:*", BATCH):
        key = as_text(raw)
        lock_key, _, suffix = key[1:].rpartition("}:")
        if suffix not in MODE_SUFFIXES:  # a semaphore's own keys ({key}:queue, ...): not ours
            continue
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
