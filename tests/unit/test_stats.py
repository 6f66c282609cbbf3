"""Counters shared across fork: what a prefork worker's children count, its parent reports."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (every mode's counters registered, before ZERO is made)
from celery_redislock.engine import counting, lateness
from celery_redislock.engine.counting import (
    add_count_listener,
    add_counters,
    counter_names,
    remove_count_listener,
    tally,
)
from celery_redislock.engine.lateness import LATENESS_BUCKETS
from celery_redislock.ops import shared_table
from celery_redislock.ops.control import redislock_stats
from celery_redislock.ops.stats import LATENCY_BUCKETS, Counters, counters

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def in_child(body: Callable[[], None], timeout: float = 10.0) -> int:
    """Run ``body`` in a forked child; its exit code (0 if it returned, 1 if it raised)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} still running after {timeout}s")


def shared_counters() -> Counters:
    """Counters mapped now, as the worker's main process maps them at worker_init, before it forks."""
    fresh = Counters()
    fresh.share()
    return fresh


def test_a_forked_child_counts_into_its_parent() -> None:
    shared = shared_counters()
    shared.incr("acquired")

    def child() -> None:
        shared.incr("acquired", 2)
        shared.incr("skipped")

    assert in_child(child) == 0
    assert in_child(child) == 0
    assert shared.snapshot() == {**dict.fromkeys(counter_names(), 0), "acquired": 5, "skipped": 2}


def count_in_forks(
    increment: Callable[[], object], per_thread: int = 3000, threads: int = 3, children: int = 3
) -> int:
    """``increment`` called ``per_thread`` times by each of ``threads`` threads, in each of
    ``children`` forked children and the parent at once (so their increments overlap); how many
    calls were made in all."""

    def child() -> None:
        workers = [
            threading.Thread(target=lambda: [increment() for _ in range(per_thread)]) for _ in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                child()
            finally:
                os._exit(0)
        pids.append(pid)
    child()  # the parent counts too, meanwhile
    for pid in pids:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    return per_thread * threads * (children + 1)


def test_concurrent_children_and_threads_lose_no_increment() -> None:
    shared = shared_counters()
    made = count_in_forks(lambda: shared.incr("released"))
    assert shared.snapshot()["released"] == made


def test_a_tally_bound_before_the_fork_counts_in_each_childs_own_row() -> None:
    # A Tally keeps where its counter is counted. Seen red without the fork hook of
    # engine.counting: every child added to the parent's cells, each under its own copy of
    # the row's lock, and counts were lost.
    shared = shared_counters()
    add_count_listener(shared.incr, shared.adder)
    try:
        released = tally("released", "app.tallied")
        released()  # bound here, to the parent's row
        made = count_in_forks(released)
    finally:
        remove_count_listener(shared.incr)
    expected = 1 + made
    assert shared.snapshot()["released"] == expected
    assert shared.by_task()["app.tallied"]["released"] == expected


def test_reset_clears_the_counters_of_every_process() -> None:
    shared = shared_counters()
    shared.incr("lost", 4)
    assert in_child(shared.reset) == 0
    assert shared.snapshot() == dict.fromkeys(counter_names(), 0)

    shared.incr("lost")
    shared.reset()

    def child() -> None:
        assert shared.snapshot()["lost"] == 0

    assert in_child(child) == 0


def test_rows_of_processes_that_are_gone_are_reused_and_their_counts_kept() -> None:
    shared = Counters(rows=4)  # two rows of processes' own: five children take turns
    shared.share()

    def child() -> None:
        shared.incr("acquired")
        assert shared._row is not None and shared._row >= 0  # a row of its own, not the shared one

    for _ in range(5):
        assert in_child(child) == 0  # reaped before the next starts
    shared.incr("acquired", 10)  # the parent takes a row too
    assert shared.snapshot()["acquired"] == 15


def test_with_every_row_taken_by_a_live_process_a_process_still_counts() -> None:
    shared = Counters(rows=3)  # one row of a process's own: the parent's
    shared.share()
    shared.incr("skipped")

    def child() -> None:
        shared.incr("skipped", 2)  # no row left for it: the shared row, under the shared lock
        assert shared._row == -1

    assert in_child(child) == 0
    assert shared.snapshot()["skipped"] == 3


def test_a_reset_in_one_process_leaves_later_counts_of_another_whole() -> None:
    shared = shared_counters()
    read, write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: counts, waits for the reset, counts again
        try:
            shared.incr("released", 7)
            os.write(write, b"x")
            os.read(go_read, 1)
            shared.incr("released", 2)
        finally:
            os._exit(0)
    assert os.read(read, 1) == b"x"
    shared.reset()
    assert shared.snapshot()["released"] == 0
    os.write(go_write, b"x")
    os.waitpid(pid, 0)
    assert shared.snapshot()["released"] == 2
    for fd in (read, write, go_read, go_write):
        os.close(fd)


def test_an_unknown_counter_is_logged_once_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Seen red: this raised KeyError, which a count made inside a task would have failed it with.
    monkeypatch.setattr(counting, "_warned", set())
    shared = shared_counters()
    with caplog.at_level(logging.WARNING, logger="celery_redislock.engine.counting"):
        shared.incr("aquired")
        shared.incr("aquired")
    assert [r.getMessage()[:52] for r in caplog.records] == [
        "Not counted: 'aquired' is not a registered counter ("
    ]
    assert shared.snapshot() == dict.fromkeys(counter_names(), 0)


def test_a_counter_registered_after_the_table_is_shared_is_summed_over_the_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The table has a column for every counter that may register: a mode registered once the
    # worker mapped it (before its pool forks) still counts in every child.
    monkeypatch.setattr(counting, "_counters", dict(counting._counters))
    shared = shared_counters()
    add_counters({"stamped": "calls stamped"}, "the stamp mode")
    assert in_child(lambda: shared.incr("stamped", 2)) == 0
    shared.incr("stamped")
    assert shared.snapshot()["stamped"] == 3
    assert list(shared.snapshot()) == list(counter_names())


def test_a_child_killed_while_holding_the_lock_does_not_wedge_the_others() -> None:
    shared = shared_counters()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            with shared._exclusive():
                os.write(write, b"x")
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"x"  # the child holds the lock now
    os.close(read)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)

    done = threading.Event()

    def count() -> None:
        shared.incr("acquired")
        done.set()

    threading.Thread(target=count, name="test-incr", daemon=True).start()
    assert done.wait(5), "the lock of a SIGKILLed child was never freed"
    assert shared.snapshot()["acquired"] == 1


def test_a_lock_held_by_another_thread_at_fork_does_not_block_the_child() -> None:
    shared = shared_counters()
    with shared._lock:  # as if another thread were mid-increment when the pool forked
        code = in_child(lambda: shared.incr("retried"))
    assert code == 0
    assert shared.snapshot()["retried"] == 1


def test_inspect_command_reports_this_process_and_the_global_counters() -> None:
    before = counters.snapshot()["redis_errors"]
    counters.incr("redis_errors")
    try:
        reply = redislock_stats(None)
        assert reply["pid"] == os.getpid()
        assert reply["counters"]["redis_errors"] == before + 1
        assert set(reply["counters"]) == set(counter_names())
    finally:
        counters.incr("redis_errors", -1)


def test_the_task_base_registers_the_inspect_command() -> None:
    # A fresh interpreter: this one already imported celery_redislock.ops.control above. An app's
    # tasks module names SingletonTask (or a compat base, which loads it): in the worker, and in
    # the client of `celery -A proj inspect redislock_stats`, which checks the command's name.
    check = (
        "from celery_redislock import SingletonTask; from celery.worker.control import Panel; "
        "print(Panel.meta['redislock_stats'].type, Panel.data['redislock_stats'].__module__)"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["inspect", "celery_redislock.ops.control"], out.stderr


def test_the_worker_maps_the_counters_before_it_forks() -> None:
    # worker_init is sent in the worker's main process before the pool forks.
    probe = """
from celery import Celery, signals
import celery_redislock
from celery_redislock.ops.stats import counters
before = counters._values is None
signals.worker_init.send(sender=None)
print(before, counters._values is not None)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


# Counters by task, the held-lock gauges and the renewal latency histogram: what a prefork
# worker's children count by task, its parent reports, within bounds.

ZERO = dict.fromkeys(counter_names(), 0)


def test_counts_of_a_task_in_children_are_summed_by_task_in_the_parent() -> None:
    # Seen red before the task column: by_task did not exist and the reply had no "tasks".
    shared = shared_counters()
    shared.incr("acquired", task="app.a")

    def child() -> None:
        shared.incr("acquired", task="app.b")  # a task first seen in a child: its slot is shared
        shared.incr("skipped", 2, task="app.a")
        shared.incr("released")  # no task's: in the totals only

    assert in_child(child) == 0
    assert in_child(child) == 0
    assert shared.by_task() == {
        "app.a": {**ZERO, "acquired": 1, "skipped": 4},
        "app.b": {**ZERO, "acquired": 2},
    }
    assert shared.snapshot() == {**ZERO, "acquired": 3, "skipped": 4, "released": 2}
    assert list(shared.by_task()["app.a"]) == list(counter_names())


def test_a_reset_clears_the_counts_by_task_too() -> None:
    shared = shared_counters()
    shared.incr("lost", 3, task="app.a")
    assert in_child(shared.reset) == 0
    assert shared.by_task() == {"app.a": ZERO}
    shared.incr("lost", task="app.a")
    assert shared.by_task()["app.a"]["lost"] == 1


def test_past_max_tasks_a_task_is_counted_in_the_totals_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(shared_table, "MAX_TASKS", 2)
    shared = Counters()
    shared.share()
    with caplog.at_level(logging.WARNING, logger="celery_redislock.ops.shared_table"):
        for task in ("app.a", "app.b", "app.c", "app.c"):
            shared.incr("acquired", task=task)
    assert set(shared.by_task()) == {"app.a", "app.b"}
    assert shared.snapshot()["acquired"] == 4
    [record] = caplog.records  # once a process, not once a count
    assert "'app.c' in the totals only" in record.getMessage()


def test_a_dead_childs_counts_by_task_are_kept_when_its_row_is_reused() -> None:
    shared = Counters(rows=4)
    shared.share()
    for _ in range(4):
        assert in_child(lambda: shared.incr("acquired", task="app.a")) == 0
    assert shared.by_task()["app.a"]["acquired"] == 4


def test_held_locks_are_reported_by_task_for_live_processes_only() -> None:
    shared = shared_counters()
    now = time.time()
    shared.renewed([("app.a", now - 90), ("app.a", now - 30), ("app.b", now - 5)], [0.002, 0.3])
    # A child that held a lock and died: its lock is no longer its, whatever it last wrote.
    assert in_child(lambda: shared.renewed([("app.c", now)], [])) == 0
    assert shared.held() == {"app.a": (2, int(now - 90)), "app.b": (1, int(now - 5))}

    shared.renewed([("app.b", now - 5)], [0.002])  # the next cycle replaces the last one's
    assert shared.held() == {"app.b": (1, int(now - 5))}

    buckets, count, total = shared.latencies()
    assert count == 3 and total == pytest.approx(0.304)
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    assert buckets[LATENCY_BUCKETS.index(0.0025)] == 2 and buckets[LATENCY_BUCKETS.index(0.5)] == 1


def test_lateness_is_summed_by_task_and_kind_over_children_dead_ones_included() -> None:
    shared = Counters(rows=4)
    shared.share()
    shared.late("rate_limit", "app.a", 0.004)
    # Four children on two rows of their own: the dead ones' histograms are folded, not lost.
    for seconds in (0.2, 0.3, 7.0, 100.0):
        assert in_child(functools.partial(shared.late, "debounce", "app.a", seconds)) == 0
    found = shared.lateness()
    assert set(found) == {("app.a", "rate_limit"), ("app.a", "debounce")}
    buckets, count, total = found["app.a", "debounce"]
    assert count == 4 and total == pytest.approx(107.5)
    assert len(buckets) == len(LATENESS_BUCKETS) + 1
    assert buckets[LATENESS_BUCKETS.index(0.25)] == 1 and buckets[LATENESS_BUCKETS.index(0.5)] == 1
    assert buckets[LATENESS_BUCKETS.index(10.0)] == 1 and buckets[-1] == 1  # +Inf
    assert found["app.a", "rate_limit"][:2] == ([1] + [0] * len(LATENESS_BUCKETS), 1)


def test_lateness_reaches_the_counters_through_its_listener_early_as_zero() -> None:
    before = counters.lateness().get(("app.listened", "debounce"), ([], 0, 0.0))
    lateness.late("debounce", "app.listened", -0.5)  # came back early and waited: on time
    _, count, total = counters.lateness()["app.listened", "debounce"]
    assert (count, total) == (before[1] + 1, before[2])
    reply = redislock_stats(None)["lateness"]["app.listened"]["debounce"]
    assert reply["count"] == count and reply["buckets"][0] >= 1
