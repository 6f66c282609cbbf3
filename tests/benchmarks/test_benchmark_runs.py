"""The benchmark harness still runs end to end, at sizes too small to measure anything.

No figure is asserted (speed is never a test): only that every scenario ran and the table
was written. Peers missing from the environment are reported in the table, not failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import crash_release, placement
from benchmarks.__main__ import main
from benchmarks.harness import Bench, Config, _mean_cpu, run_seconds
from benchmarks.send_path import main as send_path
from benchmarks.task_path import Singleton


@pytest.mark.slow
def test_the_benchmark_harness_writes_its_table(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0

    table = (tmp_path / "results.md").read_text(encoding="utf-8")
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    for heading in (
        "## Uncontended",
        "## A backlog drained",
        "## Duplicate-heavy",
        "## Renewal at scale",
        "## The floor",
    ):
        assert heading in table
    assert "| plain Celery task |" in table
    assert "| `SingletonTask` (this package) |" in table
    assert set(results["uncontended"]) >= {"plain", "redislock"}
    assert set(results["backlog"]) == set(results["uncontended"])
    assert set(results["renewal"]) == {"100"}
    # The whole call beside the pool children's share, so a lock taken at send (the peers')
    # and one taken at run (ours) are counted the same way.
    assert "| CPU µs/task: pool children | sender |" in table
    assert "| all | sending | the whole call |" in table
    for row in results["backlog"].values():
        cpu = row["cpu_us_per_task"]
        assert cpu["whole"] == pytest.approx(cpu["all"] + cpu["sending"])


def task_path(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.task_path *args``, in a process of its own: it counts locks and
    starts a renewal thread, as a worker would."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.task_path", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_task_path_benchmark_sends_and_runs_every_variant_through_celerys_tracer() -> None:
    out = task_path("--n", "50", "--repeats", "1").stdout
    rows = {line.split("  ")[1].strip() for line in out.splitlines()[2:]}
    peers = {"celery-singleton Singleton", "celery-once QueueOnce"}
    assert rows == {"plain Celery task", "SingletonTask"} | (peers if Singleton is not None else set())
    assert "sent and run" in out.splitlines()[0]
    assert "run only" in task_path("--n", "20", "--repeats", "1", "--run-only").stdout


def test_the_task_path_runs_one_batch_alone_for_an_instruction_count() -> None:
    # What --instructions runs under valgrind, three times: one kind's batch, nothing printed.
    for kind in ("none", "locked", *(["singleton"] if Singleton is not None else [])):
        assert task_path("--only", kind, "--n", "20").stdout == ""


def counted_by_function(out: str) -> dict[str, int]:
    """``--opcodes``' table: bytecodes by ``path:function`` of the package (and ``all``)."""
    return {line.split()[1]: int(line.split()[0].replace(",", "")) for line in out.splitlines()[1:]}


def of(counted: dict[str, int], function: str) -> int:
    """The count of ``function`` (``Class.method``), whichever of the package's modules has it."""
    return sum(n for name, n in counted.items() if name.endswith(f":{function}"))


def test_the_task_path_counts_our_bytecodes_by_function_and_nothing_of_celerys() -> None:
    out = task_path("--opcodes", "--n", "20").stdout
    assert out.splitlines()[0].startswith("bytecodes a task executes in celery_redislock, by function")
    counted = counted_by_function(out)
    # The task's own entry and both commands' calls are counted; Celery's tracer is not.
    assert of(counted, "SingletonTask.__call__") > 0
    assert of(counted, "ScriptRunner.execute") > 0 and of(counted, "ScriptRunner.run") > 0
    assert not any("celery/" in name for name in counted)
    total = counted.pop("all")
    assert total == sum(counted.values())


def test_the_task_path_takes_the_release_a_server_with_a_conditional_delete_gets() -> None:
    counted = counted_by_function(task_path("--opcodes", "--n", "20", "--release", "delifeq").stdout)
    assert of(counted, "ConditionalDelete.args") > 0
    assert of(counted, "ScriptRunner.run") == 0  # no script call


def test_the_send_path_benchmark_sends_each_variant_against_a_real_broker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert send_path(["--n", "20", "--repeats", "1", "--variants", "redislock,redislock-enqueue"]) == 0
    table = capsys.readouterr().out
    for variant in ("plain", "redislock", "redislock-enqueue"):
        assert f"| {variant} | " in table
    with pytest.raises(SystemExit):
        send_path(["--variants", "redislock,nope"])
    assert "unknown nope" in capsys.readouterr().err


def test_the_placement_benchmark_spins_and_calls_in_the_process_each_variant_names(tmp_path: Path) -> None:
    # 2 ms a task: far above what else the parent or a child does for a noop, so each variant's
    # CPU over plain's says which process spun. 30 tasks a variant, so the parent's own work
    # (its event loop, its timers) averages out against the spin on a loaded machine.
    config = Config(n=30, repeats=1, variants=(), probe=True, redis_server="default")
    spins = placement.variants([2000])
    bench = Bench(config, tmp_path)
    bench.cpu_clock = run_seconds
    try:
        bench.start()
        figures = placement.measure(bench, spins, config.n, config.repeats)
        # Each round trip variant set one key a task (and the warm-up's), from its own process.
        made = {where: len(bench.admin.keys(f"bench:probe:{where}:*")) for where in ("parent", "child")}
    finally:
        bench.stop()
    assert made == {"parent": 60, "child": 60}
    plain = _mean_cpu(figures["plain"].cpu)
    parent = _mean_cpu(figures["parent 2000"].cpu)
    child = _mean_cpu(figures["child 2000"].cpu)
    assert parent["worker_parent"] - plain["worker_parent"] > 1500
    assert abs(parent["worker_children"] - plain["worker_children"]) < 1000
    assert child["worker_children"] - plain["worker_children"] > 1500
    assert abs(child["worker_parent"] - plain["worker_parent"]) < 1000
    rows = placement.table(spins, figures)
    assert "| 2000 µs in the parent | " in rows and "| 2000 µs in the child | " in rows
    assert "| one round trip (`SET NX`, its reply waited for) in the parent | " in rows


def test_the_placement_benchmark_names_a_bad_size(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("25,x", "0", "-5"):
        with pytest.raises(SystemExit):
            placement.main(["--us", bad])
        assert "--us" in capsys.readouterr().err


def test_the_crash_release_benchmark_times_each_kill(capsys: pytest.CaptureFixture[str]) -> None:
    assert crash_release.main(["--kills", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kills"] == 2 and report["lock_timeout_s"] == 300
    for times in (report["lock_freed_s"], report["result_s"]):
        assert 0 < times["min"] <= times["median"] <= times["max"]


def test_the_crash_release_benchmark_names_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        crash_release.main(["--kills", "0"])
    assert "--kills" in capsys.readouterr().err
