"""The worker's lock counters and gauges as Prometheus metrics: a custom collector over the
shared counters (``ops.stats``), which already sum every prefork child in the main process.

Needs ``prometheus_client`` (the ``metrics`` extra); nothing imports this module unless metrics
are asked for (``redislock_metrics_port``, or a user's own registry).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ..engine.counting import counter
from ..engine.lateness import LATENESS_BUCKETS
from .stats import LATENCY_BUCKETS, Counters, counters

__all__ = ["LockCollector", "lock_registry"]

#: The label value of the counts made for no task (a ``RedisLock`` of the user's, a count made
#: past the tasks counted apart): an empty label is Prometheus' "no such label".
NO_TASK = ""


class LockCollector(Collector):
    """Reads the counters at each scrape: ``redislock_<counter>_total{task}`` for each registered
    counter, ``redislock_locks_held{task}``, ``redislock_oldest_lock_age_seconds{task}``, the
    renewal round trips' ``redislock_renewal_latency_seconds`` histogram, and how late postponed
    calls started, ``redislock_start_lateness_seconds{task,kind}``."""

    def __init__(self, source: Counters = counters) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        totals = self.source.snapshot()
        by_task = self.source.by_task()
        for name, total in totals.items():
            known = counter(name)
            family = CounterMetricFamily(f"redislock_{name}", known.doc if known else name, labels=["task"])
            for task, values in by_task.items():
                family.add_metric([task], values[name])
            rest = total - sum(values[name] for values in by_task.values())
            if rest:
                family.add_metric([NO_TASK], rest)
            yield family
        yield from self._held()
        yield self._latency()
        yield self._lateness()

    def _held(self) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "redislock_locks_held", "Locks held by this worker's processes now", labels=["task"]
        )
        age = GaugeMetricFamily(
            "redislock_oldest_lock_age_seconds",
            "Seconds the oldest lock held by this worker has been held (to within a renewal interval)",
            labels=["task"],
        )
        now = time.time()
        for task, (count, since) in self.source.held().items():
            held.add_metric([task], count)
            age.add_metric([task], max(0.0, now - since))
        yield held
        yield age

    def _latency(self) -> Metric:
        buckets, _, total = self.source.latencies()
        return HistogramMetricFamily(
            "redislock_renewal_latency_seconds",
            "Seconds a renewal round trip took (one per Redis, every renewal interval)",
            buckets=_cumulative(LATENCY_BUCKETS, buckets),
            sum_value=total,
        )

    def _lateness(self) -> Metric:
        family = HistogramMetricFamily(
            "redislock_start_lateness_seconds",
            "Seconds a postponed call started after it was due (its rate limit slot, its debounce's "
            "end), on the Redis server's clock; kind: the wait",
            labels=["task", "kind"],
        )
        for (task, kind), (buckets, _, total) in sorted(self.source.lateness().items()):
            family.add_metric([task, kind], _cumulative(LATENESS_BUCKETS, buckets), total)
        return family


def _cumulative(bounds: tuple[float, ...], buckets: list[int]) -> list[tuple[str, float]]:
    """A histogram's buckets (each one's count, +Inf last) as Prometheus' cumulative ones."""
    cumulative, running = [], 0
    for bound, in_bucket in zip([*map(str, bounds), "+Inf"], buckets):
        running += in_bucket
        cumulative.append((bound, float(running)))
    return cumulative


def lock_registry(source: Counters = counters, app: Any = None) -> CollectorRegistry:
    """A registry of the lock metrics alone: what the worker's endpoint serves; with ``app``,
    the gauges of its adaptive limits too (``adaptive_metrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LockCollector(source))
    if app is not None:
        from .adaptive_metrics import AdaptiveCollector

        registry.register(AdaptiveCollector(app))
    return registry
