"""benchmarks.fair_share still runs end to end, at sizes too small to measure anything: every
call of both tenants starts once in every run (the benchmark checks it), and the table and the
chart are written. No figure is asserted (speed is never a test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.fair_share import main
from tests.harness import find_rabbitmq_server


def rabbitmq_here() -> bool:
    try:
        find_rabbitmq_server()
    except RuntimeError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("broker", ["redis", pytest.param("rabbitmq", marks=pytest.mark.slow)])
def test_the_fair_share_benchmark_writes_its_table_and_chart(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if broker == "rabbitmq" and not rabbitmq_here():
        pytest.skip("no rabbitmq-server here (apt-get install rabbitmq-server)")
    argv = ["--n", "30", "--b-calls", "3", "--repeats", "1", "--broker", broker, "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"Bodies: 0 ms of CPU; broker: {broker}; fair_lanes 16. 1 runs of each task" in out
    assert "| plain Celery task |" in out and '| `SingletonTask`, `fair_key=["tenant"]` |' in out
    assert '| `SingletonTask`, `fair_key=["tenant"]`, `lock=False` |' in out
    figures = json.loads((tmp_path / "fair_share.json").read_text())
    assert set(figures["runs"]) == {"plain", "lanes", "lock", "fair", "fair-nolock"}
    for [run] in figures["runs"].values():
        assert run["cpu_us_per_call"] > 0
        assert len(run["b_waits"]) == 3 and all(0 <= ahead <= 30 for ahead in run["a_ahead"])
        assert [len(run["timeline"][tenant]) for tenant in "AB"] == [30, 3]
    # The chart is drawn where matplotlib is (the bench extra), skipped quietly where it is not.
    assert (tmp_path / "fair_share.png").is_file() == (importlib.util.find_spec("matplotlib") is not None)


def test_an_unknown_variant_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--variants", "plain,fastest"])
    assert "--variants: fastest given; choose from plain, lanes, lock, fair" in capsys.readouterr().err
