"""benchmarks.rate_partition and benchmarks.eta_memory (on Redis and RabbitMQ) still run end to end, at a size too small to measure anything: each
kind of decision is timed by the server and the partition's memory is read. No figure asserted."""

from __future__ import annotations

import pytest

from benchmarks.eta_memory import main as eta_main
from benchmarks.eta_memory import parse as eta_parse
from benchmarks.eta_memory import report as eta_report
from benchmarks.eta_memory import run as eta_run
from benchmarks.rate_partition import main
from tests.harness import RabbitMQServer


def test_the_partition_benchmark_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--size", "300", "--waiting", "10", "--calls", "5"]) == 0
    out = capsys.readouterr().out
    assert 'A "300/h" partition, window full (300 starts), 20 calls waiting' in out
    for kind in ("new call", "come-back, early", "come-back, due, window full", "copy dropped"):
        assert f"| {kind} |" in out
    assert "Memory of the partition (MEMORY USAGE, filled)" in out


def test_bad_sizes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--size", "0"])
    assert "--size and --calls must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_the_eta_memory_benchmark_prints_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert eta_main(["--calls", "20"]) == 0
    assert "20 postponed calls held by one worker: its main process' VmRSS" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("broker", "line"),
    [
        ("rabbitmq", "5 postponed calls held by one worker on RabbitMQ (classic queues)"),
        (
            "rabbitmq-quorum",
            "5 postponed calls held by RabbitMQ (quorum queues, native delayed delivery), none",
        ),
    ],
    ids=["classic", "quorum"],
)
def test_the_eta_memory_benchmark_runs_on_rabbitmq(
    rabbitmq_server: RabbitMQServer, broker: str, line: str
) -> None:
    # On the session's RabbitMQ (a vhost of its own): the classic queue's calls held by the
    # worker, the quorum queue's in the celery_delayed_* queues, none received.
    args = eta_parse(["--calls", "5", "--broker", broker, "--window", "0.5"])
    out = eta_report(eta_run(args, rabbitmq_server), args)
    assert line in out
    where = out.splitlines()[1]
    if broker == "rabbitmq":
        assert "5 unacknowledged, held by the worker" in where
    else:
        assert "the celery_delayed_* queues hold 5" in where
        assert "the worker received 0 of them" in where
