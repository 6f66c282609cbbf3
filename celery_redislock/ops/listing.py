"""The app's locks as Redis holds them: its lock keys found by SCAN, their holders and TTLs, and
their removal; for ``celery redislock`` and ``clear_locks``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from ..engine.keys import glob_escape, parse_key
from ..engine.leases import as_text
from ..engine.timing import NO_KEY, ttl_seconds
from ..integration.runtime import Runtime

__all__ = ["Lock", "held_locks", "lock_pattern", "purge_locks", "release_held", "scan_locks", "task_of"]


class Lock(NamedTuple):
    """One held lock as listed: ``ttl_ms`` is Redis' PTTL, ``NO_TTL`` for a key without a TTL."""

    key: str
    task: str
    holder: str
    ttl_ms: int

    @property
    def ttl(self) -> float | None:
        """Seconds left; None (shown as ``none``, ``null``) for a lock that has no TTL."""
        return ttl_seconds(self.ttl_ms)


def lock_pattern(prefix: str, task: str | None) -> str:
    """The SCAN glob of the lock keys under ``prefix`` (of ``task`` if given)."""
    return glob_escape(prefix) + ":" + (glob_escape(task) + ":*" if task is not None else "*")


def task_of(key: str, prefix: str, task: str | None) -> str | None:
    """The task of ``key`` when it is a lock key of the app (under ``prefix``; of ``task`` if
    given), else None."""
    try:
        key_prefix, key_task, _ = parse_key(key)
    except ValueError:
        return None
    # A longer prefix that starts with ours ("redislock:other") matches the SCAN glob too.
    return key_task if key_prefix == prefix and (task is None or key_task == task) else None


def scan_locks(runtime: Runtime, task: str | None) -> Iterator[list[tuple[bytes | str, str, str]]]:
    """Batches of ``(raw key, key, task)`` for the app's lock keys (of ``task`` if given),
    from every node (the engine SCANs each primary of a cluster)."""
    prefix = runtime.settings.key_prefix
    pattern = lock_pattern(prefix, task)
    for found in runtime.engine.scan_batches(pattern):
        batch = []
        for raw in found:
            key = as_text(raw)
            key_task = task_of(key, prefix, task)
            if key_task is not None:
                batch.append((raw, key, key_task))
        if batch:
            yield batch


def held_locks(runtime: Runtime, task: str | None, contains: str = "") -> Iterator[Lock]:
    """Each held lock of the app (of ``task`` if given, whose key has ``contains`` in it); a row
    per holder of a semaphore."""
    for batch in scan_locks(runtime, task):
        if contains:  # before the keys are read: a search reads only what it shows
            batch = [found for found in batch if contains in found[1]]
            if not batch:
                continue
        # A GET and a PTTL per key: one round trip per batch (per node of a cluster).
        infos = runtime.engine.inspect([raw for raw, _, _ in batch])
        others: list[tuple[str, str]] = []
        for (_, key, key_task), info in zip(batch, infos):
            if info.holder is not None:
                yield Lock(key, key_task, info.holder, info.ttl_ms)
            elif info.ttl_ms != NO_KEY:  # there, but not a string: a semaphore's holders
                others.append((key, key_task))
        yield from _held_slots(runtime, others)


def _held_slots(runtime: Runtime, keys: list[tuple[str, str]]) -> Iterator[Lock]:
    """A row per live holder of each semaphore (max_concurrency > 1) among ``keys``; one round trip."""
    if not keys:
        return
    states = runtime.semaphores.states([key for key, _ in keys])
    for (key, key_task), state in zip(keys, states):
        for holder, left_ms in state.holders if state is not None else ():
            yield Lock(key, key_task, holder, left_ms)


def purge_locks(runtime: Runtime, task: str | None, removed: Callable[[str], None]) -> None:
    """UNLINK the locks, calling ``removed`` with each deleted key; notify waiters as a release does."""
    for batch in scan_locks(runtime, task):
        deleted = runtime.engine.delete_many([raw for raw, _, _ in batch], notify=runtime.release_channel)
        for (_, key, _), gone in zip(batch, deleted):
            if gone:
                removed(key)


def release_held(runtime: Runtime, key: str, holders: list[str]) -> int:
    """Free ``key`` from those of ``holders`` that still hold it (compare-and-delete: a holder
    that came since is left alone), waking its waiters; how many were freed. A semaphore's key
    (max_concurrency > 1) gives back their slots; a lock's is deleted if its one holder is among
    them. A holder freed, should its task still run, takes nothing back at its next renewal."""
    notify = runtime.release_channel(key)
    if runtime.semaphores.state(key) is not None:
        return runtime.semaphores.release_by_operator(key, holders, notify=notify)
    holder = runtime.engine.holder_of(key)
    if holder is None or holder not in holders:
        return 0
    return int(runtime.engine.release_by_operator(key, holder, notify=notify))
