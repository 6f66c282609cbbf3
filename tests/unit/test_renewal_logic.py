"""The renewal timer's schedule, on a fake clock: when a cycle is due, what wakes the thread,
what a failed or lost renewal does. No thread and no Redis: ``Renewer(thread=False)`` is driven
by ``step()``, its wait moves a fake clock, and its engine is a fake answering ``renew_many``.
What the renewals do to a real server is tests/integration/test_renewal.py's."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from celery_redislock.engine import Lease
from celery_redislock.engine.leases import RenewReport
from celery_redislock.engine.renewal import LeaseEvent, Renewer, add_listener, remove_listener
from celery_redislock.ops.stats import counters


class FakeClock:
    """The thread's wait on fake time: it returns at once, the clock moved on by its seconds, or
    to the first action scheduled within them (an add, a discard) that set the event."""

    def __init__(self) -> None:
        self.now = 0.0
        self._actions: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], object]) -> None:
        heapq.heappush(self._actions, (when, next(self._order), action))

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        end = math.inf if seconds is None else self.now + seconds
        while not event.is_set() and self._actions and self._actions[0][0] <= end:
            when, _, action = heapq.heappop(self._actions)
            self.now = max(self.now, when)
            action()
        if event.is_set():
            return True
        assert seconds is not None, "the thread would wait for ever: nothing held, nothing to come"
        self.now = end
        return False


class FakeEngine:
    """Answers ``renew_many`` as Redis would, told which keys are gone or someone else's; notes
    the fake time of each call and the keys it was given."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, list[str]]] = []
        self.gone: set[str] = set()
        self.stolen: dict[str, str] = {}
        self.failing = False

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport:
        leases = list(leases)
        self.calls.append((self.clock.now, [lease.key for lease in leases]))
        if self.failing:
            raise redis.ConnectionError("Connection refused")
        report = RenewReport()
        for lease in leases:
            if lease.key in self.stolen:
                report.stolen.append((lease, self.stolen[lease.key]))
            elif lease.key in self.gone:
                self.gone.discard(lease.key)
                report.retaken.append(lease)
            else:
                report.renewed.append(lease)
        return report

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        raise AssertionError("the schedule releases nothing")

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool:
        raise AssertionError("the schedule releases nothing")

    def holders(self, key: str) -> tuple[str, ...]:
        raise AssertionError("the schedule reads no holders")

    def renewed_at(self, key: str) -> list[float]:
        return [when for when, keys in self.calls if key in keys]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def renewer(clock: FakeClock) -> Renewer:
    return Renewer(clock.monotonic, clock.wait, thread=False)


@pytest.fixture
def engine(clock: FakeClock) -> FakeEngine:
    return FakeEngine(clock)


@pytest.fixture
def told() -> Iterator[list[tuple[LeaseEvent, str, str | None]]]:
    events: list[tuple[LeaseEvent, str, str | None]] = []

    def listener(event: LeaseEvent, lease: Lease, other: str | None) -> None:
        events.append((event, lease.key, other))

    add_listener(listener)
    yield events
    remove_listener(listener)


def lease(key: str) -> Lease:
    return Lease(key, "me", 30_000)


def test_a_held_lease_is_renewed_once_every_interval(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    renewer.add(engine, lease("a"), 10.0)
    renewer.add(engine, lease("b"), 10.0)
    for _ in range(3):
        report = renewer.step()
        assert report is not None and len(report.renewed) == 2
    assert engine.calls == [(10.0, ["a", "b"]), (20.0, ["a", "b"]), (30.0, ["a", "b"])]


def test_the_interval_is_the_shortest_of_the_leases_still_held(renewer: Renewer, engine: FakeEngine) -> None:
    # Found by the thread once a cycle, never by a scan on each add (100 000 held leases).
    first, second = lease("a"), lease("b")
    renewer.add(engine, first, 500.0)
    renewer.add(engine, second, 100.0)
    assert renewer.interval() == 100.0
    renewer.add(engine, second, 900.0)  # the same lease again, asking for another interval
    assert renewer.interval() == 500.0
    assert renewer.discard(engine, first) is True
    assert renewer.interval() == 900.0
    assert renewer.discard(engine, second) is True
    assert renewer.discard(engine, second) is False
    assert renewer.interval() is None


def test_a_shorter_interval_wakes_the_thread_and_is_kept_from_its_add(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    renewer.add(engine, lease("slow"), 60.0)
    clock.at(50.0, lambda: renewer.add(engine, lease("fast"), 10.0))
    assert renewer.step() is None  # woken at 50, not renewed: nothing was due
    assert clock.now == 50.0
    renewer.step()
    assert engine.calls == [(60.0, ["slow", "fast"])]  # 10 s after the add, not 60


def test_a_longer_interval_leaves_the_thread_waiting(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    renewer.add(engine, lease("short"), 10.0)
    clock.at(5.0, lambda: renewer.add(engine, lease("long"), 30.0))
    assert renewer.step() is not None  # not woken by the add: the wait ran its 10 s
    assert engine.calls == [(10.0, ["short", "long"])]


def test_with_nothing_held_the_thread_keeps_the_last_interval_and_calls_no_redis(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    # A worker's task is usually over before the woken thread looks: it then finds nothing
    # held, and must still wait on that interval, or every next task would wake it again.
    renewer.add(engine, lease("quick0"), 60.0)
    renewer.discard(engine, lease("quick0"))
    assert renewer.step() is not None  # the thread's first look: nothing held, 60 s waited
    assert clock.now == 60.0
    for index in range(1, 20):
        clock.at(60.0 + index, lambda n=index: renewer.add(engine, lease(f"quick{n}"), 60.0))
        clock.at(60.5 + index, lambda n=index: renewer.discard(engine, lease(f"quick{n}")))
    assert renewer.step() is not None  # none of those adds woke it
    assert clock.now == 120.0
    assert engine.calls == []  # and a cycle with nothing held asks Redis nothing


def test_a_failed_renewal_is_counted_and_tried_again_one_interval_later_while_other_engines_renew(
    renewer: Renewer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    down, up = FakeEngine(clock), FakeEngine(clock)
    renewer.add(down, lease("on-down"), 10.0)
    renewer.add(up, lease("on-up"), 10.0)
    down.failing = True
    before = counters.snapshot()["redis_errors"]
    with caplog.at_level(logging.WARNING, logger="celery_redislock"):
        report = renewer.step()
    assert report is not None and report.renewed == [lease("on-up")]
    assert counters.snapshot()["redis_errors"] == before + 1
    assert "Could not renew 1 lock(s)" in caplog.text and "ConnectionError" in caplog.text
    down.failing = False
    report = renewer.step()  # no backoff: the next cycle, one interval on, tries again
    assert report is not None and lease("on-down") in report.renewed
    assert down.calls == [(10.0, ["on-down"]), (20.0, ["on-down"])]
    assert len(renewer.held()) == 2


def test_a_lease_someone_else_holds_is_told_lost_and_no_longer_renewed(
    renewer: Renewer, engine: FakeEngine, told: list[tuple[LeaseEvent, str, str | None]]
) -> None:
    renewer.add(engine, lease("stolen"), 10.0)
    renewer.add(engine, lease("kept"), 10.0)
    renewer.step()
    engine.stolen["stolen"] = "thief"
    before = counters.snapshot()["lost"]
    renewer.step()
    assert told == [("lost", "stolen", "thief")]
    assert counters.snapshot()["lost"] == before + 1
    assert [held.key for _, held in renewer.held()] == ["kept"]
    renewer.step()
    assert engine.calls[-1][1] == ["kept"]


def test_a_gone_lease_is_told_retaken_and_still_renewed(
    renewer: Renewer, engine: FakeEngine, told: list[tuple[LeaseEvent, str, str | None]]
) -> None:
    renewer.add(engine, lease("gone"), 10.0)
    renewer.step()
    engine.gone.add("gone")
    before = counters.snapshot()["retaken"]
    report = renewer.step()
    assert report is not None and report.retaken == [lease("gone")]
    assert told == [("retaken", "gone", None)]
    assert counters.snapshot()["retaken"] == before + 1
    assert [held.key for _, held in renewer.held()] == ["gone"]


def test_a_failing_listener_stops_neither_the_others_nor_the_cycle(
    renewer: Renewer,
    engine: FakeEngine,
    told: list[tuple[LeaseEvent, str, str | None]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: LeaseEvent, lease: Lease, other: str | None) -> None:
        raise RuntimeError("a listener's bug")

    add_listener(broken)  # after the fixture's: a later listener is told still
    try:
        renewer.add(engine, lease("x"), 10.0)
        renewer.add(engine, lease("y"), 10.0)
        renewer.step()
        engine.stolen.update(x="other", y="other")
        with caplog.at_level(logging.ERROR, logger="celery_redislock"):
            renewer.step()
    finally:
        remove_listener(broken)
    assert told == [("lost", "x", "other"), ("lost", "y", "other")]
    assert caplog.text.count("A lease listener failed on lost lock") == 2


def test_stop_wakes_the_wait_and_no_cycle_follows(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    renewer.add(engine, lease("a"), 10.0)
    clock.at(3.0, renewer.stop)
    assert renewer.step() is None
    assert clock.now == 3.0 and engine.calls == []


INTERVALS = st.sampled_from([1.0, 2.5, 10.0, 30.0])
#: (fake time, lease number, interval: an add; None: a discard)
OPERATIONS = st.lists(
    st.tuples(st.floats(0.0, 100.0), st.integers(0, 4), st.one_of(st.none(), INTERVALS)), max_size=30
)


@given(OPERATIONS)
def test_no_held_lease_goes_longer_than_its_interval_without_a_renewal(
    operations: list[tuple[float, int, float | None]],
) -> None:
    # Whatever adds and discards come at whatever times, each lease held is renewed within
    # its interval of its add and of its last renewal (a lock's TTL is three intervals).
    clock = FakeClock()
    renewer = Renewer(clock.monotonic, clock.wait, thread=False)
    engine = FakeEngine(clock)
    events: list[tuple[float, int, str, float | None]] = []  # (time, order, key, interval/None)
    order = itertools.count()

    def act(number: int, interval: float | None) -> None:
        key = f"lock:{number}"
        events.append((clock.now, next(order), key, interval))
        if interval is None:
            renewer.discard(engine, lease(key))
        else:
            renewer.add(engine, lease(key), interval)

    act(0, 30.0)  # the thread starts on a first add
    for when, number, interval in operations:
        clock.at(when, lambda n=number, i=interval: act(n, i))
    while clock.now < 200.0:
        renewer.step()

    for number in range(5):
        key = f"lock:{number}"
        timeline = sorted(
            [(t, o, "add" if i is not None else "discard", i) for t, o, k, i in events if k == key]
            + [(t, math.inf, "renew", None) for t in engine.renewed_at(key)]
        )
        due: float | None = None  # renewed by then at the latest, while held
        interval = 0.0
        for when, _, what, asked in timeline:
            assert due is None or when <= due, f"{key} not renewed by {due}: {timeline}"
            if what == "add":
                assert asked is not None
                interval = asked
                due = when + interval
            elif what == "discard":
                due = None
            elif due is not None:
                due = when + interval
        assert due is None or clock.now <= due


def test_leases_of_ever_shorter_intervals_do_not_push_back_an_earlier_renewal(
    renewer: Renewer, engine: FakeEngine, clock: FakeClock
) -> None:
    # Each add wakes the thread just before the cycle is due: restarted from each wake, the
    # wait would renew "a" at 57 + 28 = 85 s, long after its 30 s interval.
    renewer.add(engine, lease("a"), 30.0)
    clock.at(29.0, lambda: renewer.add(engine, lease("b"), 29.0))
    clock.at(29.5, lambda: renewer.discard(engine, lease("b")))
    clock.at(57.0, lambda: renewer.add(engine, lease("c"), 28.0))
    while not engine.calls:
        renewer.step()
    assert engine.calls[0][0] == 30.0
