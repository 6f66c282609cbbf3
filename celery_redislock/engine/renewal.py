"""The per-process renewal timer: one thread renews every lock the process holds, one batch per Redis."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable, Literal, Optional

from .counting import count
from .keys import parse_key
from .leases import REDIS_ERRORS, Lease, LeaseEngine, RenewReport
from .per_process import PerProcess

__all__ = [
    "CycleListener",
    "LeaseEvent",
    "LeaseListener",
    "Renewer",
    "Wait",
    "add_cycle_listener",
    "add_listener",
    "get_renewer",
    "remove_cycle_listener",
    "remove_listener",
]

logger = logging.getLogger(__name__)

#: What a renewal found of a held lease: ``"lost"`` (someone else holds it now: no longer
#: renewed), ``"released"`` (an operator released it: no longer renewed, not taken back) or
#: ``"retaken"`` (it was gone and free: taken back).
LeaseEvent = Literal["lost", "released", "retaken"]
#: Told, in the renewal thread, of each lease lost or re-taken: ``(event, lease, the holder
#: id it is held by now, or None)``. How the Celery glue (which this module must not import)
#: sends its signals and marks the request's lock lost.
LeaseListener = Callable[[LeaseEvent, Lease, Optional[str]], None]

#: How the thread waits: until the event is set or the seconds pass (None: no limit); True if
#: it was set. The schedule's clock, injectable so that unit tests run it on a fake one.
Wait = Callable[[threading.Event, Optional[float]], bool]

#: Told, in the renewal thread, after each cycle: ``(every lease held now, the seconds each
#: engine's renewal round trip took)``. How the worker's gauges (locks held, for how long) and
#: its renewal latency are kept off the task's path.
CycleListener = Callable[[list[Lease], list[float]], None]

_listeners: list[LeaseListener] = []
_cycle_listeners: list[CycleListener] = []


def add_listener(listener: LeaseListener) -> None:
    """Tell ``listener`` of every lease lost or re-taken in this process (and its children)."""
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: LeaseListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def add_cycle_listener(listener: CycleListener) -> None:
    """Tell ``listener`` of every renewal cycle of this process (and its children)."""
    if listener not in _cycle_listeners:
        _cycle_listeners.append(listener)


def remove_cycle_listener(listener: CycleListener) -> None:
    if listener in _cycle_listeners:
        _cycle_listeners.remove(listener)


def task_of_key(key: str) -> str | None:
    """The task name in a lock key of the form ``<prefix>:<task>:<digest>``, else None (a
    ``RedisLock`` named by its user): what a lost lock is counted against."""
    try:
        return parse_key(key)[1]
    except ValueError:
        return None


def _tell(event: LeaseEvent, lease: Lease, other: str | None) -> None:
    for listener in list(_listeners):
        try:
            listener(event, lease, other)
        except Exception:  # a listener's bug must not stop the renewal of every other lock
            logger.exception("A lease listener failed on %s lock %s", event, lease.key)


class Renewer:
    """Keeps held leases alive: every ``interval`` (the shortest asked for by a held lease)
    it renews all of them, one ``renew_many`` call per engine, so one round trip per Redis.

    The thread starts on the first ``add`` (so every pool, and every forked child, gets one
    without relying on worker signals) and stops on ``stop()``. With ``thread=False`` none
    starts: whoever made it calls ``step()`` (unit tests, on a fake ``wait``).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wait: Wait = threading.Event.wait,
        *,
        thread: bool = True,
    ) -> None:
        self.pid = os.getpid()
        self._clock = clock
        self._wait = wait
        self._threaded = thread
        # Guards _held and _renewing. Held only for dict operations: never across a network call.
        self._mutex = threading.Lock()
        # Held for a whole renewal cycle: a discard() that finds a cycle in flight waits for it,
        # so a lease released just after discard() can never be re-taken by that cycle.
        self._cycle = threading.Lock()
        # Whether a cycle has taken its batch and not finished (set and read under _mutex).
        self._renewing = False
        # Every held lease, and the interval it asked for, by (engine, key, holder): one flat
        # dict, so a pool child's add and discard of its one lock a task are one dict operation
        # each. The shortest interval is found by the thread, once a cycle (a cycle walks every
        # lease anyway), not kept up to date on each add.
        self._held: dict[tuple[LeaseEngine, str, str], tuple[Lease, float]] = {}
        # The interval the thread waits for now, or will once woken (None: not started). A lease
        # asking for no shorter one need not wake it: a worker's every task would cost a thread
        # switch.
        self._waiting: float | None = None
        # When the next cycle is due, by the clock (None: one interval after the thread looks).
        # A wake moves it only earlier: restarted from each wake, a wait could be pushed back by
        # leases of ever shorter intervals until an earlier lease expired.
        self._due: float | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        #: True once stop() was called (a plain attribute: get_renewer reads it every task).
        self.stopped = False
        self._thread: threading.Thread | None = None

    # -- what is held ---------------------------------------------------------------------

    def add(self, engine: LeaseEngine, lease: Lease, interval: float) -> None:
        """Renew ``lease`` every ``interval`` seconds (or more often) until discarded."""
        entry = (engine, lease.key, lease.holder)
        with self._mutex:
            waiting = self._waiting
            wake = waiting is None or interval < waiting
            if wake:
                # Noted now, not when the thread wakes: a worker's task has usually released
                # its lease by then, and a thread that found nothing held would wait on no
                # interval, so the next task would wake it again (a thread switch per task).
                self._waiting = interval
            self._held[entry] = (lease, interval)
            started = self._thread is not None
        if wake:
            self._wake.set()  # the thread waits for a longer interval: make it re-read
        if not started and self._threaded:
            self._start()

    def discard(self, engine: LeaseEngine, lease: Lease) -> bool:
        """Stop renewing ``lease``; returns False if it was not held. Waits for a renewal
        cycle in flight, so call it before releasing the lock in Redis."""
        with self._mutex:
            found = self._held.pop((engine, lease.key, lease.holder), None) is not None
            renewing = self._renewing
        if renewing:  # the cycle in flight may have it in its batch: let it end first
            with self._cycle:
                pass
        return found

    def held(self) -> list[tuple[LeaseEngine, Lease]]:
        with self._mutex:
            return [(entry[0], lease) for entry, (lease, _) in self._held.items()]

    def interval(self) -> float | None:
        """The current renewal interval in seconds; None when nothing is held."""
        with self._mutex:
            return self._interval_locked()

    def _interval_locked(self) -> float | None:
        return min((interval for _, interval in self._held.values()), default=None)

    # -- renewal --------------------------------------------------------------------------

    def renew_now(self) -> RenewReport:
        """Run one renewal cycle: every held lease, one round trip per engine."""
        report = RenewReport()
        with self._cycle:
            batches: dict[LeaseEngine, list[Lease]] = {}
            with self._mutex:
                self._renewing = True
                for (engine, _, _), (lease, _) in self._held.items():
                    batches.setdefault(engine, []).append(lease)
            latencies: list[float] = []
            try:
                for engine, leases in batches.items():
                    try:
                        started = self._clock()
                        outcome = engine.renew_many(leases)
                        latencies.append(self._clock() - started)
                    except REDIS_ERRORS as exc:
                        count("redis_errors")
                        logger.warning(
                            "Could not renew %d lock(s): %r; the next cycle tries again", len(leases), exc
                        )
                        continue
                    self._report(engine, outcome)
                    report.merge(outcome)
            finally:
                with self._mutex:
                    self._renewing = False
        if _cycle_listeners:
            self._tell_cycle(latencies)
        return report

    def _tell_cycle(self, latencies: list[float]) -> None:
        held = [lease for _, lease in self.held()]
        for listener in list(_cycle_listeners):
            try:
                listener(held, latencies)
            except Exception:  # a listener's bug must not stop the renewal
                logger.exception("A renewal cycle listener failed")

    def _report(self, engine: LeaseEngine, outcome: RenewReport) -> None:
        for lease in outcome.retaken:
            count("retaken", task=task_of_key(lease.key))
            logger.error(
                "Lock %s was gone (expired, or Redis lost it) while %s held it: taken back",
                lease.key,
                lease.holder,
            )
            _tell("retaken", lease, None)
        for lease in outcome.released:
            count("lost", task=task_of_key(lease.key))
            logger.warning(
                "Lock %s was released by an operator (redislock release, or the web page) while %s "
                "held it: not taken back; the task runs on without its lock",
                lease.key,
                lease.holder,
            )
            with self._mutex:  # released on purpose: stop renewing it
                self._held.pop((engine, lease.key, lease.holder), None)
            _tell("released", lease, None)
        for lease, other in outcome.stolen:
            count("lost", task=task_of_key(lease.key))
            logger.error("Lost lock %s held by %s: it is now held by %s", lease.key, lease.holder, other)
            with self._mutex:  # someone else's now: stop renewing it
                self._held.pop((engine, lease.key, lease.holder), None)
            _tell("lost", lease, other or None)

    def step(self) -> RenewReport | None:
        """One turn of the thread: wait until the next cycle is due (one interval after the
        last, or sooner for a shorter interval added since), then renew, unless woken first
        (a shorter interval arrived, or stop()); None when woken. The thread repeats it until
        stopped; unit tests drive it on a fake ``clock`` and ``wait``."""
        self._wake.clear()
        with self._mutex:
            # With nothing held, keep the last interval (add() notes it): the next lease
            # (a worker's next task) most likely asks for the same, and then add() leaves
            # this thread be.
            interval = self._waiting = self._interval_locked() or self._waiting
        now = self._clock()
        if interval is not None:
            self._due = now + interval if self._due is None else min(self._due, now + interval)
        wait = None if self._due is None else max(0.0, self._due - now)
        if self._wait(self._wake, wait) or self._stopping.is_set():
            return None
        self._due = None
        return self.renew_now()

    def _run(self) -> None:
        untraced()
        while not self._stopping.is_set():
            self.step()

    def _start(self) -> None:
        with self._mutex:
            if self._thread is not None:
                return
            # A daemon, so a process that never calls stop() can still exit; the worker's
            # shutdown handlers and atexit stop it explicitly.
            self._thread = threading.Thread(target=self._run, name="redislock-renewal", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (held leases stay in Redis until released or expired)."""
        self.stopped = True
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def release_all(self) -> int:
        """Release every held lease (shutdown); returns how many were still ours in Redis."""
        released = 0
        for engine, lease in self.held():
            self.discard(engine, lease)
            try:
                released += engine.release(lease.key, lease.holder)
            except REDIS_ERRORS as exc:
                count("redis_errors")
                logger.warning(
                    "Could not release lock %s at shutdown: %r; it expires on its TTL", lease.key, exc
                )
        return released


def untraced() -> None:
    """Keep this thread's calls out of OpenTelemetry traces, where OpenTelemetry is installed:
    an instrumented Redis client would otherwise make a span of every renewal, drowning the
    tasks' own. Set once in the thread's context (its own: a thread starts with an empty one)."""
    if "opentelemetry" not in sys.modules:  # nobody traces in this process: import nothing
        return
    from opentelemetry import context

    # The key instrumentations check (opentelemetry.instrumentation.utils), and its older,
    # plain form, which some still read.
    value = context.set_value("suppress_instrumentation", True)
    key = getattr(context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
    if key is not None:
        value = context.set_value(key, True, value)
    context.attach(value)


_renewers: PerProcess[Renewer] = PerProcess(Renewer)
#: This process's renewer; a forked child gets its own (the parent's thread is not in it).
get_renewer = _renewers.get
