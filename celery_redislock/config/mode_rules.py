"""Which dedup modes (README, "Which call runs") cannot go with which options: ``options._clash``
asks here, and raises the OptionError naming both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.checks import number_text

__all__ = ["mode_clash"]


def mode_clash(options: Mapping[str, Any], limit: int, *, merged: bool) -> tuple[str, str, str] | None:
    """The dedup modes (README, "Which call runs") against the options they cannot go with.

    ``throttle`` keeps the key after the run: one key, so not a semaphore's slots; its window
    starts when a run starts, so the lock must be held from there (not released at the start).
    ``keep_latest`` makes a refused call the pending one (re-queued until the key is free or a
    later call replaces it; ``on_duplicate`` only says whether a replaced call is skipped or,
    with "raise", fails): decided in the worker (not at enqueue), on one lock (not a
    semaphore), never with a throttle (which call would a window keep?). ``merged``: ``options``
    are the layers merged, not one layer.
    """
    if options.get("throttle") is not None:
        if limit > 1:
            return "throttle", f"cannot be used with max_concurrency={limit} (use 1)", "max_concurrency"
        if options.get("lock_until") == "started":
            problem = "cannot be used with lock_until='started' (the window starts when the run starts)"
            return "throttle", problem, "lock_until"
    if options.get("keep_latest"):
        if options.get("fencing") is True:
            problem = "True cannot be used with fencing (keep_latest takes its lock without a token)"
            return "keep_latest", problem, "fencing"
        if options.get("throttle") is not None:
            return "keep_latest", "True cannot be used with throttle (choose one mode)", "throttle"
        if limit > 1:
            problem = f"True cannot be used with max_concurrency={limit} (one running, one pending)"
            return "keep_latest", problem, "max_concurrency"
        if options.get("lock_on") == "enqueue":
            problem = "True cannot be used with lock_on='enqueue' (the pending call is chosen in the worker)"
            return "keep_latest", problem, "lock_on"
    return _debounce_clash(options, limit, merged=merged)


def _debounce_clash(options: Mapping[str, Any], limit: int, *, merged: bool) -> tuple[str, str, str] | None:
    """``debounce`` delays each call in the queue and runs the burst's latest in the worker, after
    the previous burst's run: not locked at enqueue (that would refuse the later calls at send,
    which must replace the first), not released at the start (``lock_until="started"``), on one
    lock (not a semaphore's slots), not with another mode. Its calls' ends are its own: a
    superseded call is skipped, the latest waits out a running one, so ``on_duplicate`` "skip" or
    "raise" set with it ask for what never happens (set in another layer, a default for every
    task there, they do not apply to it). ``debounce_max`` bounds a debounce (alone, it does
    nothing), and must leave room for one."""
    debounce, most = options.get("debounce"), options.get("debounce_max")
    if debounce is None:  # a debounce_max alone may be a layer's default for debounced tasks
        return None
    if most is not None and most < debounce:
        return (
            "debounce_max",
            f"must be >= debounce ({number_text(debounce)}), got {number_text(most)}",
            "debounce",
        )
    if options.get("lock_on") == "enqueue":
        problem = "cannot be used with lock_on='enqueue' (every call of a burst is sent, the latest runs)"
        return "debounce", problem, "lock_on"
    if options.get("lock_until") == "started":
        problem = "cannot be used with lock_until='started' (the burst's run waits out the previous one)"
        return "debounce", problem, "lock_until"
    if limit > 1:
        problem = f"cannot be used with max_concurrency={limit} (use 1: one run of a key at a time)"
        return "debounce", problem, "max_concurrency"
    for other in ("throttle", "keep_latest"):
        if options.get(other):
            return "debounce", f"cannot be used with {other} (choose one mode)", other
    strategy = options.get("on_duplicate")
    if not merged and strategy in ("skip", "raise"):
        problem = (
            f"cannot be used with on_duplicate={strategy!r} (a superseded call is skipped and the "
            f"burst's latest waits out a running one: use 'retry', or 'wait' to wait acquire_timeout "
            f"in the worker first)"
        )
        return "debounce", problem, "on_duplicate"
    return None
