"""What the web page shows, read from Redis as ``celery redislock list`` and ``limit show`` read it:
the held locks with who holds them and since when, the modes' keys, the named limits' partitions."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ...engine.holders import task_id_of, worker_of
from ...engine.timing import micros_time, server_time, ttl_seconds
from ...gates.rate_calls import named_base
from ...integration.runtime import Runtime
from ..fair import running_counts, show_fair
from ..holds import Hold, show_holds
from ..inventory import mode_keys
from ..limits import LimitInfo, show_limits
from ..listing import Lock, held_locks, lock_pattern

__all__ = [
    "TENANT_SORTS",
    "LockRow",
    "LockTable",
    "ModeRow",
    "Overview",
    "SeenSince",
    "TenantPage",
    "TenantRow",
    "check_task_filter",
    "lock_table",
    "overview",
    "page_problem",
]

#: How the tenants can be ordered (the ``tsort`` query parameter): what each says on the page.
TENANT_SORTS = {"backlog": "the most calls queued first", "tenant": "by name"}

#: A fencing token below this (microseconds: 2001-09-09) was counted up, not seeded from the
#: server's clock, so it tells nothing of when the lock was taken.
_CLOCK_SEEDED = 10**15


@dataclass(frozen=True)
class LockRow:
    """One held lock (a row per holder of a semaphore), as the page shows it. ``age``: seconds
    since it was taken (from its fencing token), or since this page first saw its holder
    (``age_seen``: True), None when unknown."""

    key: str
    task: str
    holder: str
    task_id: str
    worker: str
    ttl: float | None
    token: int | None
    age: float | None
    age_seen: bool


@dataclass(frozen=True)
class ModeRow:
    """A key a mode or gate keeps (a rate partition, a debounced call), described by its owner."""

    key: str
    task: str
    description: str
    ttl: float | None


@dataclass(frozen=True)
class TenantRow:
    """A tenant with a backlog in a fair queue: its calls queued, its part of the starts while
    the backlogs last, and its running calls where a ``fair_cap`` counts them (None: none does)."""

    queue: str
    tenant: str
    backlog: int
    share: float
    running: int | None


@dataclass(frozen=True)
class TenantPage:
    """One page of the waiting tenants: ``rows`` of ``total``, the ``page``-th of ``pages``,
    ordered by ``sort`` (a key of ``TENANT_SORTS``)."""

    rows: list[TenantRow]
    total: int
    page: int
    pages: int
    sort: str


@dataclass(frozen=True)
class LockTable:
    rows: list[LockRow]
    #: More locks matched than the page shows (filter by task or key to see them).
    truncated: bool


@dataclass(frozen=True)
class Overview:
    locks: LockTable
    modes: list[ModeRow]
    limits: list[LimitInfo]
    #: The page of each limit's partitions shown (1: the first), of ``limit_pages``.
    limit_page: int
    limit_pages: int
    #: None where the app has no fair share to show (the section is left out).
    tenants: TenantPage | None
    #: The operator's holds in force (``ops.holds``).
    holds: list[Hold]


class SeenSince:
    """When this process first saw each (key, holder): the age of a lock taken without a
    fencing token, which Redis does not record. Forgets what is no longer held."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def ages(self, now: float, seen: list[tuple[str, str]], complete: bool) -> list[float]:
        """Seconds since each pair was first seen (0 for a new one), on the server's clock;
        ``complete``: ``seen`` is every pair held, so the others are forgotten."""
        with self._lock:
            ages = [now - self._first.setdefault(pair, now) for pair in seen]
            if complete:
                keep = set(seen)
                self._first = {pair: at for pair, at in self._first.items() if pair in keep}
            return ages


def page_problem(name: str, value: str) -> str | None:
    """Why the query parameter ``name`` cannot be a page number (None when it can)."""
    if not value.isdigit() or int(value) < 1:
        return f"{name}={value!r} is not a page number (a whole number from 1)"
    return None


def check_task_filter(task: str) -> str | None:
    """Why ``task`` cannot name a task (None when it can): as ``celery redislock list --task``."""
    if not task or ":" in task:
        return f"{task!r} is not a task name (task names are non-empty, without ':')"
    return None


def lock_table(runtime: Runtime, task: str | None, search: str, limit: int, seen: SeenSince) -> LockTable:
    """The held locks of ``task`` (None: every task) whose key contains ``search``, at most
    ``limit`` of them, each with its age (``seen`` remembers the holders without a token)."""
    found: list[Lock] = []
    truncated = False
    for lock in held_locks(runtime, task, search):
        if len(found) == limit:
            truncated = True
            break
        found.append(lock)
    found.sort(key=lambda lock: (lock.task, lock.key, lock.holder))
    engine = runtime.engine
    tokens = engine.fence_tokens([lock.key for lock in found])
    now = server_time(engine.client)
    pairs = [(lock.key, lock.holder) for lock in found]
    seen_ages = seen.ages(now, pairs, complete=task is None and not search and not truncated)
    rows = []
    for lock, token, seen_age in zip(found, tokens, seen_ages):
        fenced = token is not None and token >= _CLOCK_SEEDED
        age = max(0.0, now - micros_time(token)) if token is not None and fenced else seen_age
        rows.append(
            LockRow(
                key=lock.key,
                task=lock.task,
                holder=lock.holder,
                task_id=task_id_of(lock.holder),
                worker=worker_of(lock.holder),
                ttl=lock.ttl,
                token=token,
                age=age,
                age_seen=not fenced,
            )
        )
    return LockTable(rows, truncated)


def overview(
    runtime: Runtime,
    app: Any,
    task: str | None,
    search: str,
    limit: int,
    seen: SeenSince,
    *,
    rows: int,
    limit_page: int = 1,
    tenant_page: int = 1,
    tenant_sort: str = "backlog",
) -> Overview:
    """Everything the page shows, for ``task`` (None: every task) and keys containing ``search``:
    ``rows`` of each named limit's partitions (its ``limit_page``-th page) and of the waiting
    tenants (the ``tenant_page``-th, ordered by ``tenant_sort``). What is read per row is read
    for the rows shown only, in batches: a view costs a few round trips however many there are."""
    locks = lock_table(runtime, task, search, limit, seen)
    prefix = runtime.settings.key_prefix
    # A named limit's partitions have rows of their own, with their figures (``limits``): their
    # keys are left out of the modes' before anything of them is read.
    named = named_base(prefix) + ":"
    modes = [
        ModeRow(key, key_task, text, ttl_seconds(ttl_ms))
        for key, key_task, text, ttl_ms in mode_keys(runtime, lock_pattern(prefix, task), task, skip=named)
        if search in key
    ]
    modes.sort(key=lambda row: (row.task, row.key))
    limits = show_limits(app, (limit_page - 1) * rows, rows)
    limit_pages = max([1, *(-(-info.found // rows) for info in limits)])
    tenants = waiting_tenants(app, tenant_page, tenant_sort, rows)
    return Overview(locks, modes, limits, limit_page, limit_pages, tenants, show_holds(app))


def waiting_tenants(app: Any, page: int, sort: str, rows: int) -> TenantPage | None:
    """The ``page``-th page of ``rows`` tenants with a backlog in the app's fair queues, as
    ``celery redislock fair show`` lists them, ordered by ``sort``; the running calls read for
    that page's tenants only. None when the app has no fair queue (the page leaves it out)."""
    queues = show_fair(app, read_running=False)
    if not queues:
        return None
    every = [(queue.queue, tenant) for queue in queues for tenant in queue.tenants]
    if sort == "tenant":
        every.sort(key=lambda pair: (pair[1].tenant, pair[0]))
    else:
        every.sort(key=lambda pair: (-pair[1].backlog, pair[1].tenant, pair[0]))
    pages = max(1, -(-len(every) // rows))
    shown = every[(page - 1) * rows : page * rows]
    counts = running_counts(app, [(queue, tenant.tenant) for queue, tenant in shown])
    return TenantPage(
        [
            TenantRow(queue, tenant.tenant, tenant.backlog, tenant.share, counts[queue, tenant.tenant])
            for queue, tenant in shown
        ],
        len(every),
        page,
        pages,
        sort,
    )
