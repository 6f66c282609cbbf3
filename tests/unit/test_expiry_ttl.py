"""The TTL of a lock held for a queued message, bounded by the message's expiry (pure logic)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from celery_redislock.integration.sending import EXPIRY_MARGIN_MS, expiry_ttl_ms, queued_ttl_ms


def _in_10_s() -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=10)


# Each expiry is made as its test runs (not at collection, which may be seconds earlier).
@pytest.mark.parametrize(
    "make_expires",
    [
        pytest.param(lambda: 10, id="seconds"),
        pytest.param(_in_10_s, id="aware datetime"),
        pytest.param(lambda: _in_10_s().replace(tzinfo=None), id="naive datetime is UTC"),
        pytest.param(lambda: _in_10_s().isoformat(), id="ISO 8601, as a retry carries it"),
        pytest.param(lambda: _in_10_s().isoformat().replace("+00:00", "Z"), id="ISO 8601 with Z"),
        pytest.param(lambda: _in_10_s().astimezone(timezone(timedelta(hours=5))), id="another zone"),
    ],
)
def test_an_expiry_bounds_the_ttl(make_expires: Callable[[], Any]) -> None:
    expires = make_expires()
    ttl = expiry_ttl_ms(expires)
    assert ttl is not None and 9_000 < ttl <= 10_000
    assert 9_000 + EXPIRY_MARGIN_MS < queued_ttl_ms(3_600_000, expires) <= 10_000 + EXPIRY_MARGIN_MS


@pytest.mark.parametrize("expires", [None, ""])
def test_no_expiry_leaves_the_ttl(expires: Any) -> None:
    assert expiry_ttl_ms(expires) is None
    assert queued_ttl_ms(3_600_000, expires) == 3_600_000


def test_a_past_expiry_leaves_the_margin_and_a_longer_one_never_stretches_the_ttl() -> None:
    assert queued_ttl_ms(3_600_000, -5) == EXPIRY_MARGIN_MS
    assert queued_ttl_ms(3_600_000, datetime.now(timezone.utc) - timedelta(hours=1)) == EXPIRY_MARGIN_MS
    assert queued_ttl_ms(60_000, 3600) == 60_000
