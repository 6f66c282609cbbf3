"""When a fair call sent with ``expires`` may be counted out of its backlog (``expires_at``):
Celery's forms of ``expires`` (seconds from now, a datetime, an ISO string), else the task's own,
plus a grace; a string Celery will refuse is left to Celery."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from celery_redislock.gates.fair_share import EXPIRY_GRACE, expires_at

WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
TASK = SimpleNamespace(expires=None, app=SimpleNamespace(timezone=timezone(timedelta(hours=2))))


@pytest.mark.parametrize(
    ("expires", "expected"),
    [
        (WHEN, WHEN.timestamp()),
        (WHEN.isoformat(), WHEN.timestamp()),
        # A naive datetime is in the app's timezone, as Celery reads it.
        (WHEN.replace(tzinfo=None), WHEN.timestamp() - 2 * 3600),
    ],
)
def test_a_datetime_or_an_iso_string_is_that_moment_plus_the_grace(expires: object, expected: float) -> None:
    assert expires_at(TASK, {"expires": expires}) == expected + EXPIRY_GRACE


def test_seconds_are_from_now_and_the_tasks_own_applies_when_the_call_gives_none() -> None:
    before = time.time()
    at = expires_at(TASK, {"expires": 30})
    assert at is not None and before + 30 + EXPIRY_GRACE <= at <= time.time() + 30 + EXPIRY_GRACE
    own = SimpleNamespace(expires=WHEN, app=TASK.app)
    assert expires_at(own, {}) == WHEN.timestamp() + EXPIRY_GRACE


def test_no_expiry_or_one_celery_will_refuse_is_none() -> None:
    assert expires_at(TASK, {}) is None
    assert expires_at(TASK, {"expires": None}) is None
    assert expires_at(TASK, {"expires": "next tuesday"}) is None
