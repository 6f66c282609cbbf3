"""What the modes keep in Redis beside the locks, for ``celery redislock list``: the keys each
registered mode names by ``keys.slot_key`` beside its lock key (its ``key_suffixes``: keep_latest's
latest call, debounce's latest call and burst start). A throttle's window is the lock key itself,
held by ``{task id}@throttled``: listed as a lock."""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.keys import slot_key, slot_key_owner
from ..engine.leases import as_text
from ..integration.runtime import Runtime
from ..modes import registered
from .listing import task_of

__all__ = ["mode_keys"]


def mode_keys(runtime: Runtime, pattern: str, task: str | None) -> Iterator[tuple[str, str, str, int]]:
    """``(key, task, description, PTTL ms)`` of each mode key of the app (of ``task`` if given);
    ``pattern`` is the glob of the lock keys (``prefix:*`` or ``prefix:task:*``)."""
    prefix = runtime.settings.key_prefix
    # Suffix -> how a row describes the key's value, as the registered modes name them.
    described = {suffix: text for mode in registered() for suffix, text in mode.key_suffixes.items()}
    # The glob of the lock keys named as slot_key names a key beside them: a prefix with a hash
    # tag keeps it (``{t}:*:*``), one without is wrapped (``{prefix:*}:*``).
    for found in runtime.engine.scan_batches(slot_key(pattern, "*")):
        batch: list[tuple[str, str, str]] = []
        for raw in found:
            key = as_text(raw)
            owner = slot_key_owner(key)
            if owner is None or owner[1] not in described:  # a lock, a semaphore's queue, ...
                continue
            key_task = task_of(owner[0], prefix, task)
            if key_task is not None:
                batch.append((key, key_task, owner[1]))
        yield from _described(runtime, batch, described)


def _described(
    runtime: Runtime, batch: list[tuple[str, str, str]], described: dict[str, str]
) -> Iterator[tuple[str, str, str, int]]:
    if not batch:
        return
    for (key, key_task, suffix), info in zip(batch, runtime.engine.inspect([k for k, _, _ in batch])):
        if info.holder is not None:
            yield key, key_task, described[suffix].format(info.holder), info.ttl_ms
