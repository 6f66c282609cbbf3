"""What the modes keep in Redis beside the locks, for ``celery redislock list``: the keys each
registered mode names by ``keys.slot_key`` beside its lock key (its ``key_suffixes``: keep_latest's
latest call, debounce's latest call and burst start), and each rate-limited partition's log (its
starts in the current window, the slots reserved, the next free slot). A throttle's window is the
lock key itself, held by ``{task id}@throttled``: listed as a lock."""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.keys import slot_key, slot_key_owner
from ..engine.leases import as_text
from ..engine.rate_limiter import rate_state
from ..engine.rates import rate_of
from ..errors import ConfigurationError
from ..integration.runtime import Runtime, task_options
from ..modes import registered
from ..modes.rate_limit import RATE_SUFFIX
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
        rates: list[tuple[str, str]] = []
        for raw in found:
            key = as_text(raw)
            owner = slot_key_owner(key)
            if owner is None or (owner[1] not in described and owner[1] != RATE_SUFFIX):
                continue  # a lock, a semaphore's queue, ...
            key_task = task_of(owner[0], prefix, task)
            if key_task is None:
                continue
            if owner[1] == RATE_SUFFIX:
                rates.append((key, key_task))
            else:
                batch.append((key, key_task, owner[1]))
        yield from _described(runtime, batch, described)
        yield from _rate_logs(runtime, rates)


def _described(
    runtime: Runtime, batch: list[tuple[str, str, str]], described: dict[str, str]
) -> Iterator[tuple[str, str, str, int]]:
    if not batch:
        return
    for (key, key_task, suffix), info in zip(batch, runtime.engine.inspect([k for k, _, _ in batch])):
        if info.holder is not None:
            yield key, key_task, described[suffix].format(info.holder), info.ttl_ms


def _rate_logs(runtime: Runtime, logs: list[tuple[str, str]]) -> Iterator[tuple[str, str, str, int]]:
    """A row per rate-limited partition's log: its state by the rate of its task, as this
    process resolves the task's options (its own and the app's; a queue's is not in the key)."""
    if not logs:
        return
    for (key, key_task), info in zip(logs, runtime.engine.inspect([k for k, _ in logs])):
        rate = _rate_of_task(runtime, key_task)
        if rate is None:
            yield key, key_task, "rate limit: no global_rate_limit known here for its task", info.ttl_ms
            continue
        state = rate_state(runtime.scripts, key, rate_of(rate))
        if state is None:
            continue
        free = "now" if not state.next_free else f"in {state.next_free:.3f}s"
        text = f"rate limit {rate}: {state.started} started in the window, {state.reserved} reserved, next free slot {free}"
        yield key, key_task, text, info.ttl_ms


def _rate_of_task(runtime: Runtime, name: str) -> str | None:
    task = runtime.app.tasks.get(name)
    try:
        options = runtime.settings.options_for(
            name, task_options(type(task)) if task is not None else {}, None
        )
    except ConfigurationError:
        return None
    rate: str | None = options.value("global_rate_limit")
    return rate
