"""benchmarks.web_page still runs end to end, at a size too small to measure anything. No figure
asserted."""

from __future__ import annotations

import pytest

from benchmarks.web_page import main


def test_the_web_page_benchmark_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--locks", "20,40", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for view in ("every lock", "one task's", "key search"):
        assert f"| 40 | {view} |" in out
