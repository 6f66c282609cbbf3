"""``python -m benchmarks.pool``: the paired repeats of several runs taken together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pool import main, pooled
from benchmarks.report import head_to_head


def run(plain: list[float], ours: list[float], **others: list[float]) -> dict[str, Any]:
    rows = {"plain": plain, "redislock": ours, **others}
    scenario = {name: {"runs": rates, "ratio": rates[0] / plain[0]} for name, rates in rows.items()}
    return {"uncontended": scenario, "backlog": scenario}


def saved(directory: Path, *runs: dict[str, Any]) -> list[str]:
    """Each run written as a results.json of its own; their paths."""
    paths = []
    for index, results in enumerate(runs):
        path = directory / f"{index}.json"
        path.write_text(json.dumps(results), encoding="utf-8")
        paths.append(str(path))
    return paths


def test_the_pooled_ratio_is_the_median_over_every_runs_paired_repeats() -> None:
    # Alone, the first run says 0.5x and the second 1.0x; their six repeats together, 0.9x.
    first = run([100.0, 100.0], [50.0, 50.0])
    second = run([10.0, 10.0, 10.0, 10.0], [9.0, 9.0, 10.0, 10.0])
    row = pooled([first, second], "backlog", "redislock")
    assert row is not None
    assert row["ratio"] == pytest.approx(0.9)
    assert row["runs"] == [0.5, 0.95]  # each run's own median
    low, high = row["ratio_ci"]
    assert low <= row["ratio"] <= high


def test_a_variant_missing_from_a_run_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_peer = run([10.0, 10.0], [9.0, 9.0], **{"celery-once": [8.0, 8.0]})
    without = run([10.0, 10.0], [9.5, 9.5])
    assert pooled([with_peer, without], "backlog", "celery-once") is None
    assert main(saved(tmp_path, with_peer, without)) == 0
    out = capsys.readouterr().out
    assert "backlog drained: 4 repeats of 2 runs" in out
    assert "`SingletonTask` (this package) | 0.925x" in out
    assert "celery-once" not in out


def test_an_unreadable_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.json"
    assert main([str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_head_to_head_pairs_each_repeat_with_the_rivals_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # In every repeat ours ran at 0.95 of celery-singleton's rate, whatever plain's did (0.76
    # and 0.79 of it): head to head says 0.95, not a ratio of the two ratios to plain.
    first = run([100.0, 50.0], [76.0, 38.0], **{"celery-singleton": [80.0, 40.0]})
    second = run([12.0, 12.0], [9.5, 9.5], **{"celery-singleton": [10.0, 10.0]})
    row = pooled([first, second], "uncontended", "redislock", "celery-singleton")
    assert row is not None
    assert row["ratio"] == pytest.approx(0.95)
    assert row["runs"] == [pytest.approx(0.95), pytest.approx(0.95)]
    assert main(saved(tmp_path, first, second)) == 0
    out = capsys.readouterr().out
    assert "Head to head: tasks/s of `SingletonTask` over the other's, same repeat" in out
    assert "| celery-singleton `Singleton` | 0.950x (0.950-0.950) | 0.950x, 0.950x |" in out
    # A rival no run measured has no row.
    assert "celery-once" not in out


def test_one_runs_report_sets_ours_against_each_rival_it_measured() -> None:
    rows = run([10.0, 10.0, 10.0], [9.0, 9.9, 9.0], **{"celery-once": [9.0, 9.0, 10.0]})["backlog"]
    line = head_to_head(rows)
    assert line.startswith("Head to head (tasks/s of `SingletonTask` over the other's, same repeat): ")
    assert "celery-once `QueueOnce` 1.00x" in line  # 1.0, 1.1, 0.9: the median is 1.0
    assert "celery-singleton" not in line
    assert head_to_head({"plain": rows["plain"]}) == ""
