"""benchmarks.rate_limits still runs end to end, at a size too small to measure anything: each kind
of decision over 1, 2 and 3 limits is timed by the server. No figure asserted."""

from __future__ import annotations

import pytest

from benchmarks.rate_limits import main


def test_the_limits_benchmark_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--size", "200", "--waiting", "5", "--calls", "4"]) == 0
    out = capsys.readouterr().out
    assert 'Decisions over 1 to 3 limits of "200/h", each window full (200 starts), 13 calls waiting' in out
    for count in (1, 2, 3):
        for kind in ("new call", "come-back, early", "come-back, due, windows full"):
            assert f"| {count} | {kind} |" in out


def test_bad_sizes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--calls", "0"])
    assert "--size and --calls must be >= 1" in capsys.readouterr().err
