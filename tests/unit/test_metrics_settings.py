"""``redislock_metrics_port`` / ``redislock_metrics_host``: read once, a bad value named."""

from __future__ import annotations

from typing import Any

import pytest

from celery_redislock import OptionError
from celery_redislock.config.metrics import MetricsSettings, read_metrics_settings


def test_no_port_serves_nothing_and_a_port_serves_on_loopback_by_default() -> None:
    assert read_metrics_settings({}) is None
    assert read_metrics_settings({"redislock_metrics_port": 9808}) == MetricsSettings("127.0.0.1", 9808)
    assert read_metrics_settings(
        {"redislock_metrics_port": 9808, "redislock_metrics_host": "0.0.0.0"}
    ) == MetricsSettings("0.0.0.0", 9808)


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ({"redislock_metrics_port": "9808"}, "redislock_metrics_port"),
        ({"redislock_metrics_port": 0}, "redislock_metrics_port"),
        ({"redislock_metrics_port": 70000}, "redislock_metrics_port"),
        ({"redislock_metrics_port": True}, "redislock_metrics_port"),
        ({"redislock_metrics_port": 9808, "redislock_metrics_host": ""}, "redislock_metrics_host"),
        ({"redislock_metrics_port": 9808, "redislock_metrics_host": 1}, "redislock_metrics_host"),
    ],
)
def test_a_bad_setting_is_named(conf: dict[str, Any], named: str) -> None:
    with pytest.raises(OptionError) as caught:
        read_metrics_settings(conf)
    assert caught.value.option == named and "app configuration" in str(caught.value)
