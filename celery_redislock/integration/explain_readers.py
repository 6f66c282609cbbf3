"""What ``explain`` (``ops.explain``) is made of: a decision as it is told, the context its
readers share (the app, the call, the server's clock, what holds now), and the registry of
readers by kind of entry: each feature registers the reader of the kinds it records (the lock's
in ``ops.explain_kinds``, a gate's or a mode's in its own module)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from celery import Celery

from ..engine.decision_record import Entry
from .runtime import Runtime

__all__ = ["Context", "Decision", "Reader", "iso", "padded", "read_entry", "reader"]


@dataclass(frozen=True)
class Decision:
    """One decision on the call: ``time`` (the lock Redis's clock, seconds since the epoch;
    None when unknown), ``kind`` (``acquired``, ``skipped``, ``retry``, ``postponed``, ...),
    ``text`` (one line saying it, with what holds now) and ``details`` (the same, as data)."""

    time: float | None
    kind: str
    text: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"time": self.time, "at": iso(self.time), "kind": self.kind, "text": self.text, **self.details}


def iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Context:
    """What the readers of entries share: the app, its runtime, the call, the server's clock."""

    app: Celery
    runtime: Runtime
    task_id: str
    now: float

    def holder_of(self, key: str) -> str | None:
        return self.runtime.engine.holder_of(key)

    def state_of(self, task_id: str) -> str:
        """The result backend's state of ``task_id`` now (PENDING: it knows nothing of it)."""
        try:
            return str(self.app.AsyncResult(task_id).state)
        except Exception as exc:  # the backend is not ours to fail on: say it
            return f"unknown ({type(exc).__name__}: {exc})"


#: Reads one kind of entry into a decision.
Reader = Callable[[Entry, Context], Decision]
_READERS: dict[str, Reader] = {}


def reader(kind: str) -> Callable[[Reader], Reader]:
    """Register the reader of ``kind`` entries (a feature registers its own kinds)."""

    def register(function: Reader) -> Reader:
        _READERS[kind] = function
        return function

    return register


def read_entry(entry: Entry, context: Context) -> Decision:
    """The decision ``entry`` tells, read by its kind's reader."""
    read = _READERS.get(entry.kind)
    if read is None:  # a kind of a newer version of the package
        return Decision(
            entry.time, entry.kind, f"{entry.kind}: {entry.reply} {' '.join(entry.fields)}".strip()
        )
    return read(entry, context)


def padded(fields: Sequence[str], count: int) -> list[str]:
    """``fields`` as exactly ``count`` strings (an older entry may have fewer)."""
    return [*fields, *[""] * (count - len(fields))][:count]
