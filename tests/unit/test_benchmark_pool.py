"""``python -m benchmarks.pool``: the paired repeats of several runs taken together."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.pool import main, pooled


def run(plain: list[float], ours: list[float], **others: list[float]) -> dict[str, Any]:
    rows = {"plain": plain, "redislock": ours, **others}
    scenario = {name: {"runs": rates, "ratio": rates[0] / plain[0]} for name, rates in rows.items()}
    return {"uncontended": scenario, "backlog": scenario}


def test_the_pooled_ratio_is_the_median_over_every_runs_paired_repeats() -> None:
    # Alone, the first run says 0.5x and the second 1.0x; their six repeats together, 0.9x.
    first = run([100.0, 100.0], [50.0, 50.0])
    second = run([10.0, 10.0, 10.0, 10.0], [9.0, 9.0, 10.0, 10.0])
    row = pooled([first, second], "backlog", "redislock")
    assert row is not None
    assert row["ratio"] == pytest.approx(0.9)
    assert row["runs"] == [0.5, 0.9]
    low, high = row["ratio_ci"]
    assert low <= row["ratio"] <= high


def test_a_variant_missing_from_a_run_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_peer = run([10.0, 10.0], [9.0, 9.0], **{"celery-once": [8.0, 8.0]})
    without = run([10.0, 10.0], [9.5, 9.5])
    assert pooled([with_peer, without], "backlog", "celery-once") is None
    paths = []
    for index, results in enumerate((with_peer, without)):
        path = tmp_path / f"{index}.json"
        path.write_text(json.dumps(results), encoding="utf-8")
        paths.append(str(path))
    assert main(paths) == 0
    out = capsys.readouterr().out
    assert "backlog drained: 4 repeats of 2 runs" in out
    assert "`SingletonTask` (this package) | 0.925x" in out
    assert "celery-once" not in out


def test_an_unreadable_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.json"
    assert main([str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
