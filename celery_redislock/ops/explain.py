"""``explain(app, task_id)``: what the package decided each time it saw a call, newest first,
read from the call's record (``engine.decision_record``) and told with what holds now (is the
lock still held, what state the holder is in, how many calls are ahead in a lane); for a call
it never saw, what the result backend and the broker can tell."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery

from ..engine.decision_record import Entry, parse_entry
from ..engine.keys import record_glob, record_key
from ..engine.leases import as_text
from ..engine.timing import server_time, to_ms, to_seconds
from ..integration.explain_readers import Context, Decision, iso, read_entry
from ..integration.runtime import Runtime, runtime_for
from . import explain_kinds  # noqa: F401  (registers the readers of every kind)
from .explain_unseen import unseen

__all__ = ["Decision", "Explanation", "explain"]

#: Why an explanation has no decisions when the record is off.
OFF = "the record of decisions is off (redislock_explain = False): nothing was kept of any call"


@dataclass(frozen=True)
class Explanation:
    """What is known of the call ``task_id``: its ``decisions``, newest first; ``recording``:
    whether the app keeps a record at all; ``unseen``: for a call without decisions, what the
    result backend and the broker can tell of it; ``now``: the lock Redis's clock when asked."""

    task_id: str
    recording: bool
    decisions: tuple[Decision, ...]
    now: float | None = None
    unseen: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "recording": self.recording,
            "now": self.now,
            "decisions": [decision.as_dict() for decision in self.decisions],
            "unseen": list(self.unseen),
        }

    def lines(self) -> Iterator[str]:
        """The explanation as a terminal shows it: a line per decision, newest first."""
        if not self.recording:
            yield f"{self.task_id}: {OFF}"
            return
        if not self.decisions:
            yield f"{self.task_id}: the package never saw this call (no decision recorded)"
            for line in self.unseen:
                yield f"  {line}"
            return
        yield f"{self.task_id}: {len(self.decisions)} decision(s), newest first (times: the lock Redis's clock)"
        for decision in self.decisions:
            yield f"  {iso(decision.time) or 'unknown time':<26}  {decision.text}"


def explain(app: Celery, task_id: str) -> Explanation:
    """What the package decided on the call ``task_id`` each time it saw it, newest first;
    raises ``redis.RedisError`` when the lock Redis is unreachable."""
    runtime = runtime_for(app)
    if runtime.recorder is None:
        return Explanation(task_id, False, ())
    entries, now = _read_record(runtime, task_id)
    context = Context(app, runtime, task_id, now)
    decisions = tuple(read_entry(entry, context) for entry in entries)
    if decisions:
        return Explanation(task_id, True, decisions, now)
    return Explanation(task_id, True, (), now, tuple(unseen(app, task_id)))


def _read_record(runtime: Runtime, task_id: str) -> tuple[list[Entry], float]:
    """The call's entries, newest first, and the server's clock (seconds). On a cluster the
    call's records are one key per slot its decisions touched: found by SCAN, merged by time."""
    recorder = runtime.recorder
    assert recorder is not None
    engine = runtime.engine
    if recorder.cluster:
        keys = sorted({as_text(key) for key in engine.scan(record_glob(task_id))})
    else:
        keys = [record_key(recorder.prefix, task_id)]
    now_ms = to_ms(server_time(engine.client))
    entries: list[Entry] = []
    for key in keys:
        pipe = engine.client.pipeline(transaction=False)
        pipe.lrange(key, 0, -1)
        pipe.pttl(key)
        raw, pttl = pipe.execute()
        for index, value in enumerate(raw):
            # Only the newest entry can be untimed (a script's entry times it when it comes).
            entry = parse_entry(value, now_ms, pttl) if index == 0 else parse_entry(value)
            if entry is not None:
                entries.append(entry)
    if recorder.cluster:
        entries.sort(key=lambda entry: entry.time or 0.0, reverse=True)
    return entries, to_seconds(now_ms)
