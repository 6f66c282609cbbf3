"""``redislock_max_postpone``: the setting where given, else half of what the app's broker holds
an unacknowledged message for; a bad value is an error naming the setting."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_redislock import OptionError
from celery_redislock.config.postpone import max_postpone
from celery_redislock.config.settings import read_settings


@pytest.mark.parametrize(
    ("conf", "seconds"),
    [
        ({"broker_url": "redis://h:6379/0"}, 1800.0),
        ({"broker_url": "rediss://h:6379/0", "broker_transport_options": {"visibility_timeout": 10}}, 5.0),
        ({"broker_url": "sentinel://h:26379;sentinel://g:26379"}, 1800.0),
        ({"broker_url": "sqs://"}, 900.0),
        ({"broker_url": "sqs://", "broker_transport_options": {"visibility_timeout": 60}}, 30.0),
        ({"broker_url": "amqp://guest@h//"}, 900.0),
        ({"broker_url": "pyamqp://h//", "broker_transport_options": {"visibility_timeout": 4}}, 900.0),
        ({"broker_url": None}, 900.0),  # Celery's default broker is amqp
        ({"broker_url": "memory://"}, 900.0),
        ({"broker_url": 1.0}, 900.0),  # no URL: Celery's to refuse, not a TypeError here
        ({"broker_url": ["redis://a/0", 2]}, 900.0),
        ({"broker_url": ["redis://a/0", "redis://b/0"]}, 1800.0),
        ({"broker_url": "memory://", "broker_transport": "redis"}, 1800.0),
        ({"broker_url": "redis://h/0", "redislock_max_postpone": 42}, 42.0),
        ({"broker_url": "redis://h/0", "redislock_max_postpone": 0.5}, 0.5),
    ],
)
def test_max_postpone_by_broker(conf: dict[str, Any], seconds: float) -> None:
    assert max_postpone(conf) == seconds


def test_read_once_per_app_from_its_settings() -> None:
    app = Celery("postpone", set_as_current=False)
    app.conf.update(broker_url="redis://h/0", broker_transport_options={"visibility_timeout": 8})
    assert read_settings(app.conf).max_postpone == 4.0


@pytest.mark.parametrize(
    ("conf", "named", "text"),
    [
        ({"redislock_max_postpone": 0}, "redislock_max_postpone", "> 0"),
        ({"redislock_max_postpone": "10"}, "redislock_max_postpone", "'10'"),
        ({"broker_transport_options": {"visibility_timeout": -1}}, "visibility_timeout", "-1"),
        # Past the visibility timeout a waiting call is given out again (two copies came due at once).
        (
            {"redislock_max_postpone": 3600},
            "redislock_max_postpone",
            "below the broker's visibility_timeout (3600s)",
        ),
        (
            {"redislock_max_postpone": 30, "broker_transport_options": {"visibility_timeout": 4}},
            "redislock_max_postpone",
            "(4s), is 30",
        ),
    ],
)
def test_a_bad_value_names_the_setting(conf: dict[str, Any], named: str, text: str) -> None:
    with pytest.raises(OptionError) as info:
        max_postpone({"broker_url": "redis://h/0", **conf})
    assert named in str(info.value) and text in str(info.value)
