"""The Prometheus gauges of the adaptive named limits: each partition's rate now (and its calls
at once, for a limit with ``in_flight``), and their floors and ceilings, read from the one state in Redis at each scrape (the value every worker decides
by, not one worker's last sight of it). Needs ``prometheus_client`` (the ``metrics`` extra)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..engine.leases import REDIS_ERRORS
from .limits import show_limits

__all__ = ["AdaptiveCollector"]

logger = logging.getLogger(__name__)


class AdaptiveCollector(Collector):
    """``redislock_adaptive_rate{limit, partition}`` (calls a second now; a partition no call
    has reported to yet: its start), ``redislock_adaptive_floor{limit}`` and
    ``redislock_adaptive_ceiling{limit}``, for the adaptive limits of ``app``; for those with
    ``in_flight``, ``redislock_adaptive_in_flight{limit, partition}`` (calls at once it admits
    now), ``redislock_adaptive_in_flight_floor{limit}`` and ``..._ceiling{limit}``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "redislock_adaptive_rate",
            "Calls a second an adaptive named limit's partition admits now (shared by every worker)",
            labels=["limit", "partition"],
        )
        floor = GaugeMetricFamily("redislock_adaptive_floor", "An adaptive limit's floor", labels=["limit"])
        ceiling = GaugeMetricFamily(
            "redislock_adaptive_ceiling", "An adaptive limit's ceiling", labels=["limit"]
        )
        flight = GaugeMetricFamily(
            "redislock_adaptive_in_flight",
            "Calls at once an adaptive named limit's partition admits now (shared by every worker)",
            labels=["limit", "partition"],
        )
        flight_floor = GaugeMetricFamily(
            "redislock_adaptive_in_flight_floor",
            "An adaptive limit's floor of calls at once",
            labels=["limit"],
        )
        flight_ceiling = GaugeMetricFamily(
            "redislock_adaptive_in_flight_ceiling",
            "An adaptive limit's ceiling of calls at once",
            labels=["limit"],
        )
        try:
            infos = [info for info in show_limits(self.app) if info.adaptive is not None]
        except REDIS_ERRORS as exc:  # a scrape must answer: the lock counters are still served
            logger.warning("Could not read the adaptive limits for the metrics: %r", exc)
            infos = []
        for info in infos:
            spec = info.adaptive
            assert spec is not None
            floor.add_metric([info.name], spec.floor)
            ceiling.add_metric([info.name], spec.ceiling)
            for partition in info.partitions:
                now = spec.start if partition.adaptive is None else partition.adaptive.rate
                rate.add_metric([info.name, partition.key], now)
            bounds = spec.in_flight
            if bounds is None:
                continue
            flight_floor.add_metric([info.name], bounds.floor)
            flight_ceiling.add_metric([info.name], bounds.ceiling)
            for partition in info.partitions:
                at_once = bounds.start if partition.flight is None else partition.flight.limit
                flight.add_metric([info.name, partition.key], at_once)
        yield rate
        yield floor
        yield ceiling
        yield flight
        yield flight_floor
        yield flight_ceiling
