"""The counters' registry and ``count``: the core's counters, those a mode or gate registers, and
a count that never raises on a task's path (an unknown name, a failing listener: logged once)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from celery_redislock.engine import counting
from celery_redislock.engine.counting import (
    CORE_COUNTERS,
    MAX_COUNTERS,
    add_count_listener,
    add_counters,
    count,
    counter,
    counter_names,
    remove_count_listener,
)

#: What ``celery inspect redislock_stats`` has reported, in this order, with every mode loaded.
REPORTED = (
    "acquired",
    "skipped",
    "retried",
    "waited",
    "lost",
    "retaken",
    "released",
    "redis_errors",
    "refused_at_send",
    "released_by_parent",
    "copies_dropped",
    "throttled",
    "replaced",
    "debounced",
    "debounce_lost",
    "rate_limited",
    "rate_copies_dropped",
    "rate_paused",
    "rate_over_runtime",
    "fair_assigned",
    "fair_unassigned",
    "fair_capped",
    "fair_due",
    "fair_healed",
    "held",
    "rate_adapted",
    "in_flight_adapted",
    "in_flight_waited",
)


@pytest.fixture
def heard() -> Iterator[list[tuple[str, int]]]:
    """The counts made while the test runs, as a listener hears them."""
    seen: list[tuple[str, int]] = []

    def listen(name: str, by: int, task: str | None) -> None:
        seen.append((name, by))

    add_count_listener(listen)
    yield seen
    remove_count_listener(listen)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A registry of the core's counters only, and no warning given yet: what the test
    registers does not reach the other tests."""
    monkeypatch.setattr(counting, "_counters", {name: counting._counters[name] for name in CORE_COUNTERS})
    monkeypatch.setattr(counting, "_warned", set())
    # The positions in place: ops.stats holds the same dictionary (POSITIONS).
    positions = dict(counting._positions)
    yield
    counting._positions.clear()
    counting._positions.update(positions)


def test_the_counters_reported_are_those_of_before_in_the_same_order() -> None:
    import celery_redislock.gates
    import celery_redislock.modes  # noqa: F401  (what loading SingletonTask registers)

    assert counter_names() == REPORTED
    assert [counter(name).owner for name in ("acquired", "throttled", "rate_limited")] == [  # type: ignore[union-attr]
        "the core",
        "the throttle mode",
        "the rate_limit gate",
    ]


@pytest.mark.usefixtures("registry")
def test_an_unknown_name_is_logged_once_and_never_raises(
    heard: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    # Seen red before the registry: the stats listener raised KeyError in the task's path.
    with caplog.at_level(logging.WARNING, logger="celery_redislock.engine.counting"):
        count("aquired")
        count("aquired", 3)
        count("acquired")
    assert heard == [("acquired", 1)]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "Not counted: 'aquired' is not a registered counter (known: acquired,"
    )


@pytest.mark.usefixtures("registry")
def test_a_failing_listener_is_logged_once_and_the_others_still_count(
    heard: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    def broken(name: str, by: int, task: str | None) -> None:
        raise OSError("no memory for the table")

    counting._listeners.insert(0, broken)
    try:
        with caplog.at_level(logging.WARNING, logger="celery_redislock.engine.counting"):
            count("released")
            count("released")
    finally:
        remove_count_listener(broken)
    assert heard == [("released", 1), ("released", 1)]
    [record] = caplog.records
    assert "the count listener" in record.getMessage() and record.exc_info is not None


@pytest.mark.usefixtures("registry")
def test_a_registered_counter_is_counted_after_the_core_ones(heard: list[tuple[str, int]]) -> None:
    add_counters({"stamped": "calls stamped"}, "the stamp mode")
    add_counters({"stamped": "calls stamped"}, "the stamp mode")  # a module imported again
    count("stamped", 2)
    assert heard == [("stamped", 2)]
    assert counter_names() == (*CORE_COUNTERS, "stamped")
    assert counter("stamped") == counting.Counter(
        "stamped", "calls stamped", "the stamp mode", len(CORE_COUNTERS)
    )


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(
    ("counters", "owner", "message"),
    [
        (
            {"acquired": "x"},
            "the stamp mode",
            "counter 'acquired' of the stamp mode: already registered by the core",
        ),
        (
            {"Stamped": "x"},
            "the stamp mode",
            "counter 'Stamped' of the stamp mode: must be lowercase letters",
        ),
        (
            {"stamped-now": "x"},
            "the stamp mode",
            "counter 'stamped-now' of the stamp mode: must be lowercase",
        ),
        ({"stamped": ""}, "the stamp mode", "counter 'stamped' of the stamp mode: must say what it counts"),
    ],
)
def test_a_bad_registration_names_the_counter_and_its_owner(
    counters: dict[str, str], owner: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        add_counters(counters, owner)


@pytest.mark.usefixtures("registry")
def test_no_more_counters_than_the_shared_table_has_columns() -> None:
    room = MAX_COUNTERS - len(CORE_COUNTERS)
    add_counters({f"c{n}": "x" for n in range(room)}, "the wide mode")
    with pytest.raises(ValueError, match=f"counter 'one_more' of the wide mode: {MAX_COUNTERS} counters"):
        add_counters({"one_more": "x"}, "the wide mode")


@pytest.mark.usefixtures("registry")
def test_a_tally_counts_as_count_does_and_sees_a_listener_added_after_its_first_count(
    heard: list[tuple[str, int]],
) -> None:
    waited = counting.tally("waited", "app.t")
    waited()
    later: list[tuple[str, int, str | None]] = []

    def listen(name: str, by: int, task: str | None) -> None:
        later.append((name, by, task))

    add_count_listener(listen)
    try:
        waited(2)
    finally:
        remove_count_listener(listen)
    waited()
    assert heard == [("waited", 1), ("waited", 2), ("waited", 1)]
    assert later == [("waited", 2, "app.t")]
    assert counting.tally("waited", "app.t") is waited


@pytest.mark.usefixtures("registry")
def test_a_tally_uses_a_listeners_binder_once_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    bound: list[tuple[str, str | None]] = []
    added: list[int] = []

    def listen(name: str, by: int, task: str | None) -> None:
        raise AssertionError("a listener with a binder is not called per count")

    def bind(name: str, task: str | None) -> counting.Adder:
        bound.append((name, task))

        def add(by: int) -> None:
            if by < 0:
                raise OSError("no memory for the table")
            added.append(by)

        return add

    add_count_listener(listen, bind)
    try:
        lost = counting.tally("lost")
        with caplog.at_level(logging.WARNING, logger="celery_redislock.engine.counting"):
            lost()
            lost(3)
            lost(-1)
            lost(-1)
    finally:
        remove_count_listener(listen)
    # The stats listener (ops.stats) may be registered too: each gets its own adder.
    assert bound == [("lost", None)]
    assert added == [1, 3]
    [record] = [r for r in caplog.records if "the count listener" in r.getMessage()]
    assert record.exc_info is not None


@pytest.mark.usefixtures("registry")
def test_a_tally_of_a_name_not_registered_yet_counts_once_it_is(
    heard: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    stamped = counting.tally("stamped_late")
    with caplog.at_level(logging.WARNING, logger="celery_redislock.engine.counting"):
        stamped()
        stamped()
    add_counters({"stamped_late": "calls stamped"}, "the stamp mode")
    stamped()
    assert heard == [("stamped_late", 1)]
    [record] = caplog.records
    assert record.getMessage().startswith("Not counted: 'stamped_late' is not a registered counter")
