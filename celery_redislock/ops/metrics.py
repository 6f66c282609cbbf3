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
from .stats import LATENCY_BUCKETS, Counters, counters

__all__ = ["LockCollector", "lock_registry"]

#: The label value of the counts made for no task (a ``RedisLock`` of the user's, a count made
#: past the tasks counted apart): an empty label is Prometheus' "no such label".
NO_TASK = ""


class LockCollector(Collector):
    """Reads the counters at each scrape: ``redislock_<counter>_total{task}`` for each registered
    counter, ``redislock_locks_held{task}``, ``redislock_oldest_lock_age_seconds{task}``, and the
    renewal round trips' ``redislock_renewal_latency_seconds`` histogram."""

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
        cumulative, running = [], 0
        for bound, in_bucket in zip([*map(str, LATENCY_BUCKETS), "+Inf"], buckets):
            running += in_bucket
            cumulative.append((bound, float(running)))
        return HistogramMetricFamily(
            "redislock_renewal_latency_seconds",
            "Seconds a renewal round trip took (one per Redis, every renewal interval)",
            buckets=cumulative,
            sum_value=total,
        )


def lock_registry(source: Counters = counters, app: Any = None) -> CollectorRegistry:
    """A registry of the lock metrics alone: what the worker's endpoint serves; with ``app``,
    the gauges of its adaptive limits too (``adaptive_metrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LockCollector(source))
    if app is not None:
        from .adaptive_metrics import AdaptiveCollector

        registry.register(AdaptiveCollector(app))
    return registry
