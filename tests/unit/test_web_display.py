"""The page's display helpers: a key or an id breakable between its parts only, escaped; the
workers' lateness replies summed by task and kind, with bucket-bound percentiles."""

from __future__ import annotations

import re

import pytest

from celery_redislock.engine.lateness import LATENESS_BUCKETS
from celery_redislock.ops.web.display import LatenessRow, breakable, lateness_rows

KEY = "redislock:proj.tasks.nightly_report:2e7d2c03a9507ae265ecf5b5356885a5"


def test_a_key_may_break_after_its_separators_only_each_part_kept_whole() -> None:
    html = str(breakable(KEY))
    assert html == (
        '<span class="seg">redislock:</span><wbr><span class="seg">proj.tasks.nightly_report:</span><wbr>'
        '<span class="seg">2e7d2c03a9507ae265ecf5b5356885a5</span>'
    )
    assert re.sub(r"<[^>]+>", "", html) == KEY
    holder = "3f2c1a9e-5b7d-4e0f-9a61-2d8c4b7e1f03@celery@worker1:4242:1"
    assert str(breakable(holder)).count("<wbr>") == 4
    assert str(breakable("")) == '<span class="seg"></span>'


def test_a_key_is_escaped_part_by_part() -> None:
    html = str(breakable("redislock:proj.<script>alert(1)</script>:x"))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;:" in html


def reply(task: str, kind: str, values: list[float]) -> dict[str, object]:
    buckets = [0] * (len(LATENESS_BUCKETS) + 1)
    for value in values:
        buckets[
            next((i for i, bound in enumerate(LATENESS_BUCKETS) if value <= bound), len(LATENESS_BUCKETS))
        ] += 1
    return {"lateness": {task: {kind: {"count": len(values), "sum": sum(values), "buckets": buckets}}}}


def test_lateness_is_summed_over_the_workers_by_task_and_kind() -> None:
    rows = lateness_rows(
        [
            reply("a", "debounce", [0.004] * 8),
            reply("a", "debounce", [0.3, 100.0]),
            reply("b", "rate_limit", [0.04]),
            {"counters": {}},  # a worker of an older version: no lateness
        ]
    )
    assert rows[1] == LatenessRow("b", "rate_limit", 1, pytest.approx(0.04), 0.05, 0.05)  # type: ignore[arg-type]
    [debounced] = rows[:1]
    assert (debounced.task, debounced.kind, debounced.count) == ("a", "debounce", 10)
    assert debounced.mean == pytest.approx((0.032 + 100.3) / 10)
    assert debounced.p50 == 0.005 and debounced.p90 == 0.5  # the 9th of 10 is in (0.25, 0.5]
    assert lateness_rows([reply("c", "debounce", [100.0])])[0].p50 is None  # past the last bound
