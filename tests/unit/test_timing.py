"""engine.timing, the one place seconds and milliseconds are converted and TIME is read, and
what each caller makes of a PTTL that is no time left (-1: no TTL, -2: no key)."""

from __future__ import annotations

import pytest

from celery_redislock.compat._common import Refusal, countdown
from celery_redislock.engine.timing import NO_KEY, NO_TTL, time_of, to_ms, to_seconds, ttl_seconds
from celery_redislock.ops.listing import Lock


def test_milliseconds_to_seconds_and_back() -> None:
    assert to_seconds(1500) == 1.5 and to_seconds(0) == 0.0
    assert to_ms(to_seconds(4213)) == 4213


@pytest.mark.parametrize(("pttl", "seconds"), [(NO_TTL, None), (NO_KEY, None), (0, 0.0), (2500, 2.5)])
def test_a_pttl_is_seconds_left_or_none(pttl: int, seconds: float | None) -> None:
    assert ttl_seconds(pttl) == seconds


def test_the_list_shows_none_for_a_lock_without_a_ttl() -> None:
    assert Lock("k", "t", "h", NO_TTL).ttl is None
    assert Lock("k", "t", "h", 66_000).ttl == 66.0


@pytest.mark.parametrize(("pttl", "left"), [(NO_TTL, 0.0), (NO_KEY, 0.0), (1234, 1.234)])
def test_celery_once_countdown_is_a_number_zero_when_no_time_is_left(pttl: int, left: float) -> None:
    assert countdown(pttl) == left
    assert Refusal("k", "id", "id@queued", pttl).countdown == left


def test_a_time_reply_is_seconds_since_the_epoch() -> None:
    assert time_of(b"1700000000", b"250000") == 1_700_000_000.25
    assert time_of(1700000000, 999999) == pytest.approx(1_700_000_000.999999)
