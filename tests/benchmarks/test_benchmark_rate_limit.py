"""benchmarks.rate_limit still runs end to end, at sizes too small to measure anything: both
limiters drain their burst and the uncontended pair gives one ratio a repeat. No figure is
asserted but the limiter's own log (speed is never a test; the limit is)."""

from __future__ import annotations

import pytest

from benchmarks.rate_limit import main


@pytest.mark.slow
def test_the_rate_limit_benchmark_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--burst",
                "12",
                "--rate",
                "5/s",
                "--workers",
                "1",
                "--n",
                "5",
                "--repeats",
                "1",
                "--decisions",
                "10",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Burst of 12 calls on 5/s (1 prefork workers, -c 2):" in out
    [ours] = [line for line in out.splitlines() if line.startswith("| `global_rate_limit`")]
    assert ours.split("|")[3].strip() == "5"  # the most starts in any second, by the limiter's log
    assert "| Celery's `rate_limit` |" in out
    assert "over 1 paired repeats" in out and "(medians of 10)" in out


def test_a_bad_rate_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--rate", "5/d"])
    assert (
        "--rate must be a rate 'N/s', 'N/m' or 'N/h' (N an int from 1 to 1000000000), got '5/d'"
        in capsys.readouterr().err
    )
