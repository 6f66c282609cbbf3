"""benchmarks.send_path reports each variant's median µs a send, and its difference from plain's."""

from __future__ import annotations

from benchmarks.send_path import report


def test_the_report_gives_each_variants_median_and_its_difference_from_plain() -> None:
    text = report({"plain": [530.0, 500.0, 560.0], "redislock-enqueue": [700.0, 640.0, 610.0]}, n=1000)
    assert "median of 3 batches of 1000" in text
    assert "| plain | 530.0 | +0.0 |" in text
    assert "| redislock-enqueue | 640.0 | +110.0 |" in text
