"""Counts of lock events, handed to whoever listens, and the names that may be counted: the core
declares its counters here, a mode or a gate registers its own, and the engine and the Celery
glue count without knowing where counts go (a worker's shared counters, ``ops.stats``, listen)."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = [
    "CORE_COUNTERS",
    "MAX_COUNTERS",
    "POSITIONS",
    "Counter",
    "Tally",
    "TaskTallies",
    "add_count_listener",
    "add_counters",
    "count",
    "counter",
    "counter_names",
    "not_registered",
    "registered_counters",
    "remove_count_listener",
    "tally",
]

logger = logging.getLogger(__name__)

#: Told of each count: ``(name, by, task)``, the task's name when the count is one task's
#: (None: a count of no task's, a lock taken outside Celery).
CountListener = Callable[[str, int, Optional[str]], None]
#: What adds ``by`` to one counter of one task (or of none), where a listener counts it.
Adder = Callable[[int], None]
#: A listener's own ``(name, task) -> Adder``: where it counts that, found once.
Binder = Callable[[str, Optional[str]], Adder]

#: The core's counters (the lock itself, whatever the mode): name -> what it counts.
CORE_COUNTERS: Mapping[str, str] = {
    "acquired": "locks taken, take-overs included",
    "skipped": "duplicates not run (``raise`` included)",
    "retried": "duplicates re-queued (and redelivered copies waiting for their original)",
    "waited": 'locks taken after waiting (``on_duplicate="wait"``)',
    "lost": "locks found held by someone else at renewal",
    "retaken": "locks found gone at renewal and taken back",
    "released": "locks released",
    "redis_errors": "Redis errors when taking, renewing or releasing",
    # Counted in the sending process: a worker reports those its own tasks sent.
    "refused_at_send": '``apply_async`` / ``delay`` calls refused by a ``lock_on="enqueue"`` '
    "lock, nothing published",
    "released_by_parent": "locks of a pool process that died, freed by the worker's main process "
    "(in ``released`` too)",
}

#: Counters at most, every owner's together: a worker's shared table is laid out before it
#: forks its pool, so its width cannot grow afterwards.
MAX_COUNTERS = 64

#: A counter's name is a key of ``inspect redislock_stats``' reply and may become a metric's.
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_CORE = "the core"


@dataclass(frozen=True)
class Counter:
    """A registered counter: its ``name``, what it counts (``doc``), who registered it
    (``owner``: ``"the core"``, a mode's or a gate's name) and its place in registration order."""

    name: str
    doc: str
    owner: str
    position: int


_listeners: list[CountListener] = []
_binders: dict[CountListener, Binder] = {}
#: Moves whenever what a ``Tally`` found may be stale: a listener added or removed, a fork (a
#: child counts in places of its own).
_generation = 0
_counters: dict[str, Counter] = {}
_positions: dict[str, int] = {}
#: Each registered counter's place in registration order, kept as counters register: what a
#: count's listener looks a name up in, once a count.
POSITIONS: Mapping[str, int] = _positions
_warned: set[object] = set()


def add_counters(counters: Mapping[str, str], owner: str) -> None:
    """Register ``owner``'s ``counters`` (name -> what it counts), after those registered
    before: ``count`` takes their names from now on. Registering the same again is a no-op; a
    name another owner registered, a malformed name or one too many is a ``ValueError``."""
    for name, doc in counters.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"counter {name!r} of {owner}: must be lowercase letters, digits and '_', "
                f"starting with a letter"
            )
        known = _counters.get(name)
        if known is not None:
            if known.owner != owner:
                raise ValueError(f"counter {name!r} of {owner}: already registered by {known.owner}")
            continue
        if not isinstance(doc, str) or not doc:
            raise ValueError(f"counter {name!r} of {owner}: must say what it counts, got {doc!r}")
        if len(_counters) >= MAX_COUNTERS:
            raise ValueError(f"counter {name!r} of {owner}: {MAX_COUNTERS} counters are registered already")
        _counters[name] = Counter(name, doc, owner, len(_counters))
        _positions[name] = _counters[name].position


add_counters(CORE_COUNTERS, _CORE)


def counter(name: str) -> Counter | None:
    """The registered counter ``name``, or None."""
    return _counters.get(name)


def counter_names() -> tuple[str, ...]:
    """Every registered counter's name, in registration order (the core's first)."""
    return tuple(_counters)


def registered_counters() -> tuple[Counter, ...]:
    """Every registered counter, in registration order (the core's first)."""
    return tuple(_counters.values())


def add_count_listener(listener: CountListener, bind: Binder | None = None) -> None:
    """Call ``listener(name, by, task)`` for every count from now on (once, however often added).
    ``bind``: the listener's own ``(name, task) -> adder``, which a ``Tally`` calls instead."""
    global _generation
    if listener not in _listeners:
        _listeners.append(listener)
    if bind is not None:
        _binders[listener] = bind
    _generation += 1


def remove_count_listener(listener: CountListener) -> None:
    global _generation
    if listener in _listeners:
        _listeners.remove(listener)
    _binders.pop(listener, None)
    _generation += 1


def _forked() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_forked)


def count(name: str, by: int = 1, task: str | None = None) -> None:
    """``by`` more of the registered counter ``name`` (of ``task``, a task's name, when it is
    one task's event: the counts are also kept by task). Never raises: counts are made on a task's
    path, so an unknown name, or a listener that fails, is logged once at WARNING and the count
    dropped."""
    if name not in _positions:
        not_registered(name)
        return
    for listener in _listeners:
        try:
            listener(name, by, task)
        except Exception:
            _listener_failed(listener, name)


def not_registered(name: str) -> None:
    """A count of ``name``, which no one registered, is dropped: say so, once a process."""
    _warn_once(name, "Not counted: %r is not a registered counter (known: %s)", name, ", ".join(_counters))


def _listener_failed(listener: CountListener, name: str) -> None:
    """In an ``except`` block: the count of ``name`` by ``listener`` raised (logged once)."""
    exc_type = sys.exc_info()[0]
    _warn_once(
        (listener, exc_type), "Not counted %r: the count listener %r failed", name, listener, exc_info=True
    )


def _warn_once(what: object, message: str, *args: object, exc_info: bool = False) -> None:
    """Log ``message`` at WARNING the first time ``what`` goes wrong in this process: a count
    made every task would otherwise repeat it every task."""
    if what in _warned:
        return
    _warned.add(what)
    logger.warning(message, *args, exc_info=exc_info)


class Tally:
    """Counter ``name`` of ``task`` (None: of no task's), counted by calling it: where each
    listener counts it is found on the first count, and again after a fork or a listener's
    change, so a count on a task's path looks nothing up by name. Never raises, as ``count``."""

    __slots__ = ("_add", "_generation", "_heard", "name", "task")

    def __init__(self, name: str, task: str | None = None) -> None:
        self.name = name
        self.task = task
        self._add: Adder = _nothing
        self._heard: tuple[CountListener, ...] = ()
        self._generation = -1

    def __call__(self, by: int = 1) -> None:
        if self._generation != _generation:
            self._bind()
        try:
            self._add(by)
        except Exception:
            # One listener's adder (several are wrapped by _each, which names each).
            for listener in self._heard[:1]:
                _listener_failed(listener, self.name)

    def _bind(self) -> None:
        name, task = self.name, self.task
        generation, heard = _generation, tuple(_listeners)
        if name not in _positions:  # not registered (yet): dropped, and looked up again next time
            self._add, self._heard = _nothing, ()
            not_registered(name)
            return
        adds = []
        for listener in heard:
            bind = _binders.get(listener)
            try:
                adds.append(bind(name, task) if bind is not None else _adder(listener, name, task))
            except Exception:
                _listener_failed(listener, name)
                adds.append(_nothing)
        self._add = adds[0] if len(adds) == 1 else _each(heard, adds, name)
        self._heard, self._generation = heard, generation


def tally(name: str, task: str | None = None) -> Tally:
    """The ``Tally`` of counter ``name`` of ``task``, made once: a caller on a task's path keeps
    it (a ``TaskTallies``)."""
    found = _tallies.get((name, task))
    if found is None:
        found = _tallies.setdefault((name, task), Tally(name, task))
    return found


class TaskTallies:
    """The core's counts of ``task`` that every locked run makes, bound once (a task's plan
    keeps them): ``acquired`` and ``released``."""

    __slots__ = ("acquired", "released")

    def __init__(self, task: str) -> None:
        self.acquired = tally("acquired", task)
        self.released = tally("released", task)


_tallies: dict[tuple[str, str | None], Tally] = {}


def _nothing(by: int) -> None:
    pass


def _adder(listener: CountListener, name: str, task: str | None) -> Adder:
    """A listener without a binder: called as ``count`` calls it."""

    def add(by: int) -> None:
        listener(name, by, task)

    return add


def _each(heard: tuple[CountListener, ...], adds: list[Adder], name: str) -> Adder:
    """Several listeners' adders, each called whatever another one does (a failure logged once)."""

    def add(by: int) -> None:
        for listener, one in zip(heard, adds):
            try:
                one(by)
            except Exception:
                _listener_failed(listener, name)

    return add
