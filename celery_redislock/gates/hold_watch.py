"""Each worker process's copy of the operator's holds (``engine.holds``), kept fresh off the calls'
path: a thread of the process reads them again every ``REFRESH`` seconds, on a client of its own
(``Runtime.background_client``), and the hold gate (``task_holds``) only looks at what it read
last. Primed as the process starts, before it runs a call: a prefork child at
``worker_process_init``, a solo, threads or green pool's worker process by the ``HoldsPrime``
bootstep, after the pool and before the consumer. So no call waits on Redis for the holds, the
first one included; a process that did not prime (a pool of another kind, a spawned child) waits
for its first read on its first call. Each process logs, at INFO, the holds it sees whenever they
change."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Optional

from celery import Celery, bootsteps, signals

from ..engine.counting import count
from ..engine.holds import Hold, HoldKey, peek_holds
from ..engine.leases import REDIS_ERRORS
from ..engine.per_process import PerProcess
from ..engine.renewal import untraced
from ..errors import RedisLockError
from ..integration.runtime import Runtime, runtime_for
from ..integration.task import SingletonTask

__all__ = [
    "PRIME_WAIT",
    "REFRESH",
    "WATCH",
    "Held",
    "HoldWatch",
    "HoldsPrime",
    "Snapshot",
    "prime",
    "watched",
]

logger = logging.getLogger(__name__)

#: Seconds between a process's reads of the holds: a new hold, or a lift, reaches every worker
#: process within this (and the read's round trip).
REFRESH = 1.0
#: Seconds a process starting (or a call of a process that did not prime) waits for its first
#: read of the holds.
PRIME_WAIT = 2.0

#: A task's holds as a process keeps them: each one's key and its end on this process's
#: ``time.monotonic`` clock (None: until lifted). ``Optional``, not ``| None``: evaluated at
#: import, on Python 3.9 too.
Held = list[tuple[HoldKey, Optional[float]]]


class Snapshot:
    """What a process read last of one app's holds, by task name. ``live`` is False once nothing
    keeps it fresh (its watch stopped, or the process is a fork of the one that read it)."""

    __slots__ = ("__weakref__", "by_task", "live", "read", "runtime", "seen")

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = weakref.ref(runtime)
        self.by_task: dict[str, Held] = {}
        self.live = True
        #: Set once a read was tried (found the holds, or failed).
        self.read = threading.Event()
        #: What the last read found, as logged: (task, key, timed) of each hold.
        self.seen: frozenset[tuple[str, HoldKey, bool]] = frozenset()


class HoldWatch:
    """One per process: the snapshot of each app's holds it was asked for, and the thread that
    reads them (at once for a new one, then every ``REFRESH`` seconds) until ``stop()``."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = REFRESH if interval is None else interval
        self._snapshots: weakref.WeakKeyDictionary[Runtime, Snapshot] = weakref.WeakKeyDictionary()
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: True once stop() was called (what ``PerProcess`` asks).
        self.stopped = False
        # Whether the last read failed, by runtime: its WARNING is logged once, not every second.
        self._failing: weakref.WeakKeyDictionary[Runtime, bool] = weakref.WeakKeyDictionary()

    def watch(self, runtime: Runtime, wait: float = PRIME_WAIT) -> Snapshot:
        """The snapshot of ``runtime``'s holds; a new one is read by the thread at once, waited
        for up to ``wait`` seconds (a lock Redis that does not answer must not hold up a pool
        child's start past Celery's ``worker_proc_alive_timeout``: it is read again later)."""
        snapshot = self._snapshots.get(runtime)
        if snapshot is not None:
            if not snapshot.read.is_set():  # another thread asked first: its read is not in
                snapshot.read.wait(wait)
            return snapshot
        with self._mutex:
            snapshot = self._snapshots.get(runtime)
            if snapshot is None:
                snapshot = self._snapshots[runtime] = Snapshot(runtime)
                if self._thread is None and not self.stopped:
                    self._thread = threading.Thread(target=self._run, name="redislock-holds", daemon=True)
                    self._thread.start()
                self._wake.set()
        snapshot.read.wait(wait)
        return snapshot

    def refresh(self) -> None:
        """Read the holds of every app watched again."""
        for runtime, snapshot in list(self._snapshots.items()):
            self._read(runtime, snapshot)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; the snapshots are no longer live (a call asks for a new watch)."""
        self.stopped = True
        self._wake.set()
        self.forget()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def forget(self) -> None:
        """Mark every snapshot not live: nothing keeps them fresh any more."""
        for snapshot in list(self._snapshots.values()):
            snapshot.live = False

    def _run(self) -> None:
        untraced()
        while True:
            self._wake.clear()  # before the reads: a watch asked for meanwhile wakes the next
            if self.stopped:
                return
            try:
                self.refresh()
            except Exception:  # a bug here must not stop the next reads
                logger.exception("Could not read the operator's holds")
            self._wake.wait(self.interval)

    def _read(self, runtime: Runtime, snapshot: Snapshot) -> None:
        """Read ``runtime``'s holds into ``snapshot``. Redis unreachable: the holds read last
        are kept (a hold stops no call for want of Redis), logged and counted once until a read
        succeeds."""
        try:
            holds = peek_holds(runtime.background_client, runtime.settings.key_prefix)
        except REDIS_ERRORS as exc:
            if not self._failing.get(runtime):  # counted once, not every second while it lasts
                self._failing[runtime] = True
                count("redis_errors")
                logger.warning("Could not read the operator's holds (keeping those read before): %r", exc)
            snapshot.read.set()
            return
        self._failing.pop(runtime, None)
        now = time.monotonic()
        by_task: dict[str, Held] = {}
        for hold in holds:
            by_task.setdefault(hold.task, []).append(
                (hold.key, None if hold.left is None else now + hold.left)
            )
        seen = frozenset((hold.task, hold.key, hold.left is not None) for hold in holds)
        if seen != snapshot.seen:
            snapshot.seen = seen
            logger.info("Holds seen by process %d: %s", os.getpid(), _listed(holds))
        snapshot.by_task = by_task  # one assignment: a call reads the old dict or the new one
        snapshot.read.set()


def _listed(holds: list[Hold]) -> str:
    if not holds:
        return "none"
    return "; ".join(
        f"{hold.task}{' ' + hold.key_text() if hold.key else ''} "
        f"{'until lifted' if hold.left is None else f'for {hold.left:.1f}s more'}"
        for hold in holds
    )


def _forked() -> None:
    # In a forked child: the parent's thread is not here, so its snapshots would go stale.
    # Registered before PerProcess's own hook (hooks run in registration order in the child),
    # so the parent's watch is still the current one here.
    watch = WATCH.current()
    if watch is not None:
        watch.forget()


os.register_at_fork(after_in_child=_forked)
WATCH: PerProcess[HoldWatch] = PerProcess(HoldWatch)


def watched(runtime: Runtime) -> Snapshot:
    """This process's snapshot of ``runtime``'s holds (read now if it has none)."""
    return WATCH.get().watch(runtime)


def prime(app: Celery) -> None:
    """Read ``app``'s holds in this process now and keep them fresh, if it has a SingletonTask.
    Settings that cannot be read are ``SettingsCheck``'s to report: nothing is primed."""
    if not any(isinstance(task, SingletonTask) for task in app.tasks.values()):
        return
    try:
        runtime = runtime_for(app)
    except (RedisLockError, ValueError):
        return
    watched(runtime)


# The apps of the workers made in this process, or in the parent it was forked from, and the pid
# of the process that made each.
_apps: weakref.WeakKeyDictionary[Celery, int] = weakref.WeakKeyDictionary()


class HoldsPrime(bootsteps.StartStopStep):
    """Prime the holds where the pool runs calls in the worker's own process (solo, threads,
    gevent, eventlet), after the pool and before the consumer; note the app for the children a
    prefork pool forks, which prime at ``worker_process_init``."""

    name = "celery_redislock.HoldsPrime"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        _apps[parent.app] = os.getpid()

    def start(self, parent: Any) -> None:
        if not _forks(parent.pool):
            prime(parent.app)


def _forks(pool: Any) -> bool:
    """Whether ``pool`` runs the calls in child processes (prefork)."""
    from celery.concurrency.prefork import TaskPool

    return isinstance(pool, TaskPool)


@signals.worker_init.connect(weak=False)
def _add_step(sender: Any = None, **_: Any) -> None:
    app: Celery | None = getattr(sender, "app", None)
    if app is not None:
        app.steps["worker"].add(HoldsPrime)


@signals.worker_process_init.connect(weak=False)
def _prime_child(**_: Any) -> None:
    # A prefork child, just forked: its worker's app was noted by its parent. The solo pool sends
    # it in the worker's own process, which HoldsPrime primes (and which may have noted the apps
    # of workers that ran before it, in a test process).
    pid = os.getpid()
    for app, noted_by in list(_apps.items()):
        if noted_by != pid:
            prime(app)


@signals.worker_process_shutdown.connect(weak=False)
def _stop(**_: Any) -> None:
    watch = WATCH.current()
    if watch is not None:
        watch.stop()


@signals.worker_shutdown.connect(weak=False)
def _stop_at_shutdown(**_: Any) -> None:
    _stop()
