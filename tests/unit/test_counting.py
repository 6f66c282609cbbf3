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
    "throttled",
    "replaced",
    "debounced",
    "debounce_lost",
    "rate_limited",
    "rate_copies_dropped",
    "rate_paused",
    "fair_assigned",
    "fair_unassigned",
    "fair_capped",
)


@pytest.fixture
def heard() -> Iterator[list[tuple[str, int]]]:
    """The counts made while the test runs, as a listener hears them."""
    seen: list[tuple[str, int]] = []

    def listen(name: str, by: int) -> None:
        seen.append((name, by))

    add_count_listener(listen)
    yield seen
    remove_count_listener(listen)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry of the core's counters only, and no warning given yet: what the test
    registers does not reach the other tests."""
    monkeypatch.setattr(counting, "_counters", {name: counting._counters[name] for name in CORE_COUNTERS})
    monkeypatch.setattr(counting, "_warned", set())


def test_the_counters_reported_are_those_of_before_in_the_same_order() -> None:
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
    def broken(name: str, by: int) -> None:
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
