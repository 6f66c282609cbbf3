"""Rates as users write them (``"10/s"``, ``"10/s burst 50"``, several at once) and their wire form
(what the scripts and the runtime rates in Redis hold): parsed, refused with a message naming the
value, and the same rates after a round trip through the wire form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_redislock.engine.checks import BadValue
from celery_redislock.engine.keys import unit_member
from celery_redislock.engine.rates import Rate, parse_rate, parse_rates, rates_from_wire, rates_wire


def test_rates_are_read_one_or_several_with_or_without_a_burst() -> None:
    assert parse_rates("5/s, 20/m") == (Rate(5, 1), Rate(20, 60))
    assert parse_rates(["10/s burst 50", Rate(1, 3600)]) == (Rate(10, 1, 50), Rate(1, 3600))
    assert str(Rate(10, 1, 50)) == "10/s burst 50" and Rate(10, 1, 50).capacity == 50
    assert Rate(10, 1).capacity == 10


def test_the_task_option_s_rate_takes_no_burst() -> None:
    with pytest.raises(BadValue, match=r"got '10/s burst 5'$"):
        parse_rate("10/s burst 5")
    with pytest.raises(BadValue, match=r"a burst is not allowed here"):
        parse_rate(Rate(10, 1, 5))


@pytest.mark.parametrize("text", ["", "5:1000", "5:1500:0", "0:1000:0", "5:1000:0;", "a:1:2"])
def test_a_wire_form_not_made_by_the_engine_is_refused(text: str) -> None:
    with pytest.raises(BadValue, match=r"wire form"):
        rates_from_wire(text)


rates = st.builds(
    Rate,
    st.integers(1, 10**6),
    st.sampled_from([1, 60, 3600]),
    st.one_of(st.none(), st.integers(1, 10**6)),
)


@given(st.lists(rates, min_size=1, max_size=4))
def test_the_wire_form_gives_the_same_rates_back(given_rates: list[Rate]) -> None:
    assert rates_from_wire(rates_wire(given_rates)) == tuple(given_rates)


@given(st.text(min_size=1), st.integers(0, 10**6), st.text(), st.integers(0, 99))
def test_no_task_id_makes_two_units_alike(one: str, attempt: int, other: str, unit: int) -> None:
    # Unit entries of a call never equal those of another call, whatever the task ids.
    first = unit_member(f"g:{one}:{attempt}", unit)
    assert first == unit_member(f"g:{one}:{attempt}", unit)
    if other != one:
        assert first != unit_member(f"g:{other}:{attempt}", unit)
    assert first != unit_member(f"g:{one}:{attempt}", unit + 1)
