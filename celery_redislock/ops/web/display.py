"""How the page writes a key or an id, and how late the workers' postponed calls started: the
values its templates show that need more than escaping."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ...engine.lateness import LATENESS_BUCKETS

__all__ = ["LatenessRow", "breakable", "lateness_rows"]

#: Where a key or an id may break over lines: after each of its separators, never inside a part
#: (a hex digest or a task id broken mid-way reads as two values).
_SEPARATED = re.compile(r"([^:@]*[:@]|[^:@]+$)")


def breakable(value: Any) -> Markup:
    """``value`` escaped, each part up to and with its separator (``:``, ``@``) kept whole
    (``<span class="seg">``), a line break allowed between two parts only (``<wbr>``)."""
    parts = _SEPARATED.findall(str(value)) or [""]
    return Markup("<wbr>").join(Markup('<span class="seg">{}</span>').format(part) for part in parts)


@dataclass(frozen=True)
class LatenessRow:
    """How late one task's postponed calls started after a wait of ``kind``, over the workers
    that answered the last poll: ``count`` calls, their ``mean`` (seconds), and the upper bound
    of the bucket holding each of the median and the 90th percentile (None: past the last)."""

    task: str
    kind: str
    count: int
    mean: float
    p50: float | None
    p90: float | None


def lateness_rows(replies: Sequence[Mapping[str, Any]]) -> list[LatenessRow]:
    """The ``lateness`` of the workers' ``redislock_stats`` replies, summed by task and kind."""
    summed: dict[tuple[str, str], tuple[list[int], int, float]] = {}
    for reply in replies:
        for task, kinds in (reply.get("lateness") or {}).items():
            for kind, hist in (kinds or {}).items():
                buckets, count, total = summed.get((task, kind), ([0] * (len(LATENESS_BUCKETS) + 1), 0, 0.0))
                for i, value in enumerate(hist.get("buckets", [])[: len(buckets)]):
                    buckets[i] += int(value)
                summed[task, kind] = (
                    buckets,
                    count + int(hist.get("count", 0)),
                    total + float(hist.get("sum", 0)),
                )
    return [
        LatenessRow(
            task, kind, count, total / count, _bound(buckets, count, 0.5), _bound(buckets, count, 0.9)
        )
        for (task, kind), (buckets, count, total) in sorted(summed.items())
        if count
    ]


def _bound(buckets: list[int], count: int, quantile: float) -> float | None:
    """The upper bound of the bucket the ``quantile`` falls in (None: the +Inf bucket)."""
    running = 0
    for bound, in_bucket in zip([*LATENESS_BUCKETS, None], buckets):
        running += in_bucket
        if running >= quantile * count:
            return bound
    return None
