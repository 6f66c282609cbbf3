"""The burst of duplicate calls the demo and the compose producer send, and what became of it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from celery.canvas import Signature
from celery.result import AsyncResult

from celery_redislock import DuplicateTaskError

from .tasks import (
    import_feed,
    nightly_export,
    rebuild_index,
    refresh_cache,
    reindex_document,
    render_preview,
    send_digest,
    send_report,
)


@dataclass(frozen=True)
class Group:
    """Calls that are duplicates of each other (one lock key), and how the task handles them."""

    label: str
    handling: str
    calls: list[Signature[Any]]
    #: Send the duplicates once the first call runs, so that they find it running. Not needed
    #: for a task locked at enqueue: its lock is held from the moment it is sent, and its
    #: duplicates are not sent at all.
    wait_started: bool = True


def burst() -> list[Group]:
    """The calls, in the order they are sent."""
    return [
        Group("rebuild_index(1)", "skip (the default)", [rebuild_index.s(1) for _ in range(4)]),
        Group(
            "send_report(7, pdf|csv)",
            'retry (queue "reports"), lock_key=["user_id"]',
            [send_report.s(7, "pdf"), send_report.s(7, fmt="csv")],
        ),
        Group("import_feed('prices')", "raise", [import_feed.s("prices") for _ in range(3)]),
        Group("refresh_cache('home')", "wait", [refresh_cache.s("home") for _ in range(2)]),
        Group(
            "nightly_export('2024-06-01')",
            'lock_on="enqueue"',
            [nightly_export.s("2024-06-01") for _ in range(4)],
            wait_started=False,
        ),
        Group("send_digest('ops')", "throttle=60", [send_digest.s("ops") for _ in range(3)]),
        Group(
            "render_preview(3, v0..v3)",
            "keep_latest: v0 and the latest run",
            [render_preview.s(3, version) for version in range(4)],
        ),
        Group(
            "reindex_document(4, v0..v3)",
            "debounce=1: the last call runs",
            [reindex_document.s(4, version) for version in range(4)],
            wait_started=False,
        ),
    ]


@dataclass
class Sent:
    """A group's calls once sent: one AsyncResult per call (lock_on=enqueue duplicates share one)."""

    group: Group
    results: list[AsyncResult[Any]]

    @property
    def messages(self) -> list[AsyncResult[Any]]:
        """The distinct tasks actually sent, in order."""
        return list({result.id: result for result in self.results}.values())


class Pending(Exception):
    """Some tasks had not started or finished by the deadline."""


def send(groups: list[Group], timeout: float = 60.0, into: list[Sent] | None = None) -> list[Sent]:
    """Each group's first call, then, once a worker has taken it, its duplicates; the next group
    once a worker has taken those too (so that one group's duplicates do not queue behind the
    next group's work, and find the first call over). Appends to ``into`` as it goes."""
    sent = [] if into is None else into
    for group in groups:
        item = Sent(group, [group.calls[0].apply_async()])
        sent.append(item)
        if group.wait_started:
            _wait_taken(item.results[0], group.label, timeout, running=True)
        item.results += [call.apply_async() for call in group.calls[1:]]
        if group.wait_started:
            for result in item.results[1:]:
                _wait_taken(result, group.label, timeout)
    return sent


def _wait_taken(result: AsyncResult[Any], label: str, timeout: float, running: bool = False) -> None:
    # PENDING until a worker process takes it: then STARTED (task_track_started in
    # celeryconfig), RETRY, SUCCESS or FAILURE. ``running``: until its body runs (RUNNING, set by
    # the body) or it has ended: STARTED comes before the lock is taken, and keep_latest would
    # count a duplicate sent then as newer than a first call that has not taken its lock yet.
    waiting = ("PENDING", "STARTED") if running else ("PENDING",)
    deadline = time.monotonic() + timeout
    while result.state in waiting:
        if time.monotonic() > deadline:
            raise Pending(f"{label} [{result.id}] was not taken by a worker within {timeout:.0f}s")
        time.sleep(0.05)  # polling the result backend, bounded by the deadline


@dataclass
class Outcome:
    """What became of a group: every message sent either ran or was a duplicate not run,
    skipped (``on_duplicate="skip"``, the modes) or raised (``on_duplicate="raise"``)."""

    group: Group
    calls: int
    sent: int
    ran: int = 0
    skipped: int = 0
    raised: int = 0
    failed: list[str] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def overlapped(self) -> bool:
        """True if two runs of the group's one lock key were ever running at the same time."""
        runs = sorted(self.runs, key=lambda run: float(run["started"]))
        return any(later["started"] < earlier["finished"] for earlier, later in zip(runs, runs[1:]))


def collect(sent: list[Sent], timeout: float = 120.0) -> list[Outcome]:
    """Wait for every message sent and sort it into ran, skipped (a duplicate) or failed."""
    deadline = time.monotonic() + timeout
    outcomes = []
    for item in sent:
        messages = item.messages
        outcome = Outcome(item.group, calls=len(item.results), sent=len(messages))
        for result in messages:
            try:
                value = result.get(timeout=max(deadline - time.monotonic(), 0.1), propagate=False)
            except TimeoutError:
                raise Pending(
                    f"{item.group.label} [{result.id}] still {result.state} after {timeout:.0f}s"
                ) from None
            if result.successful():
                outcome.ran += 1
                outcome.runs.append(value)
            elif isinstance(value, DuplicateTaskError):
                # A raised duplicate failed through Celery's failure path, which stores its
                # traceback; a skipped one is stored as a FAILURE without one (nothing failed).
                if result.traceback:
                    outcome.raised += 1
                else:
                    outcome.skipped += 1
            else:
                outcome.failed.append(f"{item.group.label} [{result.id}]: {result.state} {value!r}")
        outcomes.append(outcome)
    return outcomes


#: The tally's counted columns, each an ``Outcome`` attribute.
COLUMNS = ("calls", "sent", "ran", "skipped", "raised")


def tally(outcomes: list[Outcome]) -> list[str]:
    """A table: per group, calls made, tasks sent, how many ran, were skipped, raised."""
    rows: list[tuple[str, ...]] = [("", *COLUMNS, "")]
    for o in outcomes:
        note = o.group.handling + ("; RUNS OVERLAPPED" if o.overlapped else "")
        rows.append((o.group.label, *(str(getattr(o, name)) for name in COLUMNS), note))
    total = [sum(getattr(o, name) for o in outcomes) for name in COLUMNS]
    rows.append(("total", *map(str, total), ""))
    counted = len(COLUMNS) + 1
    widths = [max(len(row[i]) for row in rows) for i in range(counted)]
    return [
        "  ".join(
            [
                row[0].ljust(widths[0]),
                *(cell.rjust(w) for cell, w in zip(row[1:counted], widths[1:])),
                row[counted],
            ]
        ).rstrip()
        for row in rows
    ]


def problems(outcomes: list[Outcome]) -> list[str]:
    """What went wrong, if anything: a task that failed for another reason, or runs that overlapped."""
    found = [failure for o in outcomes for failure in o.failed]
    found += [f"two runs of {o.group.label} overlapped" for o in outcomes if o.overlapped]
    return found
