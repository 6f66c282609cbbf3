"""The web page's pure parts: the counters history (replies summed per task from the per-task
breakdown, else the worker totals; increases per poll, a worker restart counted as none; a
bounded memory) and which addresses the command warns for."""

from __future__ import annotations

from celery_redislock.ops.web.history import ALL_TASKS, CounterHistory, totals_of


def test_replies_are_summed_per_task_and_a_reply_without_a_breakdown_counts_under_all_tasks() -> None:
    replies = [
        {
            "pid": 1,
            "counters": {"acquired": 5},
            "tasks": {"a": {"acquired": 2, "skipped": 1}, "b": {"acquired": 3}},
        },
        {"pid": 2, "counters": {"acquired": 4}, "tasks": {"a": {"acquired": 4}}},
        {"pid": 3, "counters": {"acquired": 7, "lost": 1}},  # a worker of an older version
    ]
    assert totals_of(replies) == {
        "a": {"acquired": 6, "skipped": 1},
        "b": {"acquired": 3},
        ALL_TASKS: {"acquired": 7, "lost": 1},
    }


def test_a_chart_shows_the_increase_per_poll_and_a_restart_as_no_increase() -> None:
    history = CounterHistory()
    for when, acquired in enumerate([0, 4, 10, 2, 3]):  # the worker restarted before the 4th poll
        history.add(float(when), {"a": {"acquired": acquired, "other": 99}})
    [chart] = history.charts(width=40, height=10)
    assert chart.task == "a" and chart.peak == 6
    [(name, _, points, last)] = chart.lines  # "other" is not charted
    assert (name, last) == ("acquired", 3)
    heights = [float(point.split(",")[1]) for point in points.split()]
    assert heights == [round(10 - step * 10 / 6, 1) for step in (4, 6, 0, 1)]


def test_the_history_keeps_its_last_polls_only_and_a_task_filter_keeps_the_totals() -> None:
    history = CounterHistory(size=3)
    for when in range(5):
        history.add(float(when), {"a": {"acquired": when}, "b": {"acquired": 1}, ALL_TASKS: {"lost": 0}})
    assert [when for when, _ in history.samples()] == [2.0, 3.0, 4.0]
    assert [chart.task for chart in history.charts("a")] == [ALL_TASKS, "a"]


def test_the_web_command_warns_for_every_address_but_loopback() -> None:
    # `celery redislock web --host H` without --auth warns unless H is loopback.
    from celery_redislock.ops.web_cli import _loopback

    assert all(map(_loopback, ["127.0.0.1", "127.0.0.2", "::1", "localhost"]))
    assert not any(map(_loopback, ["0.0.0.0", "::", "10.1.2.3", "example.com", ""]))


def test_a_chart_places_each_poll_by_its_time_and_marks_a_restart() -> None:
    history = CounterHistory()
    for when, acquired in [(100.0, 0), (110.0, 4), (130.0, 1), (140.0, 3)]:  # restarted before 130
        history.add(when, {"a": {"acquired": acquired}})
    [chart] = history.charts(width=40, height=10)
    assert (chart.start, chart.end) == (100.0, 140.0)
    assert chart.restarts == ((130.0, 30.0),)
    [(_, _, points, last)] = chart.lines
    assert [float(point.split(",")[0]) for point in points.split()] == [10.0, 30.0, 40.0]
    assert last == 3
