"""benchmarks.gevent_drain's arithmetic: a span from the first call's end, calls after it."""

from __future__ import annotations

import pytest

from benchmarks.gevent_drain import main, rate, row


def test_the_rate_counts_the_calls_after_the_first_end() -> None:
    assert rate([10.0, 12.0, 14.0]) == (4.0, 0.5)
    assert rate([3.0, 1.0, 2.0]) == (2.0, 1.0)


def test_fewer_than_two_calls_have_no_rate() -> None:
    assert rate([]) == (0.0, 0.0)
    assert rate([5.0]) == (0.0, 0.0)


def test_a_row_names_the_task_and_says_how_many_calls_ended() -> None:
    assert row("drain.single", 1, 4, [0.0, 2.0], 3) == "| SingletonTask | 1 | 4 | 2/3 | 2.00 | 0.5 |"


def test_the_benchmark_drains_both_tasks_on_a_real_gevent_worker(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--n", "3", "--concurrency", "2", "--prefetch", "4"]) == 0
    table = capsys.readouterr().out
    assert "| Task | 2 | 4 | 3/3 |" in table
    assert "| SingletonTask | 2 | 4 | 3/3 |" in table
