"""benchmarks.adaptive_limit still runs end to end, at sizes too small to measure anything: one
C, one worker, windows of seconds. Its table and a plot a scenario are written; no figure is
asserted (speed and convergence are the benchmark's to measure, the worker tests' to bound)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.adaptive_limit import main


@pytest.mark.slow
def test_the_adaptive_limit_benchmark_prints_its_table_and_plots(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    args = ["--capacities", "5", "--settle", "6", "--hold", "4", "--workers", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| converge default, C=5/s, 1 workers | reached |" in out
    assert "| follow fixed 5/s, 1 workers, C=5/s doubled then halved to 2.5/s | doubled reached |" in out
    assert len(list(tmp_path.glob("adaptive-*.png"))) == 3


def test_a_bad_capacity_or_rule_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--capacities", "5,-1"])
    assert "must be numbers > 0, got '5,-1'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--rules", "aimd,vegas"])
    assert "must be of default, aimd, gradient, got 'vegas'" in capsys.readouterr().err
