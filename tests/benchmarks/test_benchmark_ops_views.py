"""benchmarks.ops_views still runs end to end, at a size too small to measure anything. No figure
asserted."""

from __future__ import annotations

import pytest

from benchmarks.ops_views import main


def test_the_ops_views_benchmark_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tenants", "20", "--partitions", "10", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for view in ("fair show", "limit show", "web page"):
        assert f"| {view} |" in out
