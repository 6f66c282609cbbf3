"""``explain``: what the package decided each time it saw a call, told by real workers' records,
one test per kind of decision (on a Redis broker; the waits on RabbitMQ too:
``REDISLOCK_BROKER=rabbitmq``)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import DuplicateTaskError, RateLimitPaused, SingletonTask, explain
from celery_redislock.contrib.testing import poll
from celery_redislock.engine.keys import copy_key
from celery_redislock.ops.holds import hold_calls, lift_calls
from celery_redislock.waits.copies import COPY_HEADER

from .mode_harness import key_for
from .test_cli import celery_cmd  # noqa: F401 (the fixture)

HOLDER = "holder-x@elsewhere:1:1"


def kinds(app: Celery, task_id: str) -> list[str]:
    return [decision.kind for decision in explain(app, task_id).decisions]


def test_an_uncontended_call_is_told_acquired_and_whether_it_still_holds(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()
    go = threading.Event()

    @app.task(base=SingletonTask, shared=False, name="explain.run")
    def run(n: int) -> int:
        go.wait(30)
        return n

    with worker(app, concurrency=1):
        result = run.delay(1)
        assert poll(lambda: kinds(app, result.id) == ["acquired"], timeout=20)
        running = explain(app, result.id).decisions[0]
        assert running.details["still_held"] is True
        assert running.details["key"] == key_for(app, run, 1)
        assert "still held by this call" in running.text
        assert running.time is not None and abs(running.time - explain(app, result.id).now) < 30  # type: ignore[operator]
        go.set()
        assert result.get(timeout=20) == 1
    done = explain(app, result.id).decisions
    assert [d.kind for d in done] == ["acquired"] and done[0].details["still_held"] is False


def test_a_skipped_duplicate_names_its_holder_and_the_holders_state_now(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.skip")
    def skipped(n: int) -> int:
        return n

    locks.set(key_for(app, skipped, 2), HOLDER, px=60_000)
    with worker(app, concurrency=1):
        result = skipped.delay(2)
        with pytest.raises(DuplicateTaskError):
            result.get(timeout=20)
    [decision] = explain(app, result.id).decisions
    assert decision.kind == "skipped"
    assert decision.details["holder"] == HOLDER
    assert decision.details["holder_task_id"] == "holder-x"
    assert decision.details["holder_holds"] is True
    assert decision.details["holder_state"] == "PENDING"
    assert HOLDER in decision.text and "still holds it" in decision.text


def test_a_retried_duplicate_says_when_it_comes_back(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(
        base=SingletonTask,
        shared=False,
        name="explain.retry",
        on_duplicate="retry",
        retry_countdown=1,
        max_retries=1,
    )
    def retried(n: int) -> int:
        return n

    key = key_for(app, retried, 3)
    locks.set(key, HOLDER, px=60_000)
    with worker(app, concurrency=1):
        result = retried.delay(3)
        # Out of retries at the second refusal: skipped.
        assert poll(lambda: kinds(app, result.id) == ["skipped", "retry"], timeout=30)
    newest, first = explain(app, result.id).decisions
    assert first.details["retry_at"] == pytest.approx(first.time + 1)  # type: ignore[operator]
    assert "re-queued to retry at" in first.text
    # It came back when told, on the server's clock (the broker's delay is whole or part seconds).
    assert newest.time is not None and newest.time >= first.details["retry_at"] - 0.05


def test_a_call_taken_after_a_refusal_shows_both_newest_first(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.wait", on_duplicate="wait", acquire_timeout=30)
    def waiter(n: int) -> int:
        return n

    key = key_for(app, waiter, 4)
    locks.set(key, HOLDER, px=60_000)
    with worker(app, concurrency=1):
        result = waiter.delay(4)
        assert poll(lambda: "waiting" in kinds(app, result.id), timeout=20)
        locks.delete(key)
        assert result.get(timeout=30) == 4
    found = kinds(app, result.id)
    assert found[0] == "acquired" and set(found[1:]) == {"waiting"}


def test_a_call_never_seen_says_so_and_what_the_broker_and_backend_tell(
    make_app: Callable[..., Celery], request: pytest.FixtureRequest
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.unseen")
    def later(n: int) -> int:
        return n

    result = later.delay(5)  # no worker: the broker holds it
    explanation = explain(app, result.id)
    assert explanation.recording and explanation.decisions == ()
    lines = "\n".join(explanation.lines())
    assert "never saw this call" in lines and "PENDING" in lines
    if request.config.getoption("broker") == "redis":
        assert (
            "still holds the call in queue 'celery', not yet given to a worker, 0 message(s) ahead" in lines
        )
    else:
        assert "cannot tell" in lines
    nothing = explain(app, str(uuid.uuid4()))
    assert "not found among" in "\n".join(nothing.lines()) or "cannot tell" in "\n".join(nothing.lines())


def test_explain_says_when_the_record_is_off(make_app: Callable[..., Celery], worker: Any) -> None:
    app = make_app(redislock_explain=False)

    @app.task(base=SingletonTask, shared=False, name="explain.off")
    def quiet(n: int) -> int:
        return n

    with worker(app, concurrency=1):
        result = quiet.delay(6)
        assert result.get(timeout=20) == 6
    explanation = explain(app, result.id)
    assert not explanation.recording and explanation.decisions == ()
    assert "redislock_explain = False" in "\n".join(explanation.lines())


def test_a_postponed_call_is_told_its_slot_and_starts_within_half_a_second_of_it(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    """A loaded queue: 16 calls at once under 4/s. Each postponed call's first promise (its slot
    on the server's clock, given when it was postponed) is kept within 0.5 s: the start the
    same clock recorded when it was granted."""
    app = make_app()

    @app.task(
        base=SingletonTask,
        shared=False,
        name="explain.rate",
        global_rate_limit="4/s",
        rate_limit_key=["account"],
    )
    def limited(account: str, n: int) -> int:
        return n

    with worker(app, concurrency=2):
        results = [limited.delay("acme", n) for n in range(16)]
        assert sorted(result.get(timeout=60) for result in results) == list(range(16))
    postponed = 0
    for result in results:
        decisions = explain(app, result.id).decisions
        # Newest first: the lock taken once the limit let it start.
        assert [d.kind for d in decisions[:2]] == ["acquired", "started"]
        started = decisions[1]
        assert "explain.rate" in started.details["limits"][0]
        promises = [d for d in decisions if d.kind == "postponed"]
        if not promises:
            continue
        postponed += 1
        first = promises[-1]  # the oldest: the promise made when it was first postponed
        assert first.details["predicted_start"] == pytest.approx(started.time, abs=0.5), [
            (d.time, d.text) for d in decisions
        ]
        assert "postponed to a slot of limit" in first.text
    assert postponed >= 8  # 16 calls under 4/s: most waited


def test_a_pause_is_told_with_its_end(make_app: Callable[..., Celery], worker: Any) -> None:
    app = make_app()
    raised: list[str] = []

    @app.task(base=SingletonTask, shared=False, bind=True, name="explain.pause", global_rate_limit="10/s")
    def paused(self: Any, n: int) -> int:
        if not raised:
            raised.append(self.request.id)
            raise RateLimitPaused(retry_after=1.5)
        return n

    with worker(app, concurrency=1):
        result = paused.delay(7)
        assert result.get(timeout=30) == 7
    decisions = explain(app, result.id).decisions
    found = [d.kind for d in decisions]
    # Newest first: its start, after it came back for its slot (early, then kept), the pause.
    assert found[:2] == ["acquired", "started"] and found[-3:] == ["paused", "acquired", "started"], found
    pause = decisions[-3]
    assert pause.details["pause_end"] == pytest.approx(pause.time + 1.5, abs=0.1)  # type: ignore[operator]
    assert "held by a pause of limit" in pause.text
    assert decisions[1].time is not None and decisions[1].time >= pause.details["pause_end"] - 0.05


def test_a_call_held_by_an_operator_is_told_what_holds_it_and_until_when(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    # Seen red before the hold gate kept its decision: the held call was told only "the live
    # copy of the call", never held.
    app = make_app(redislock_max_postpone=1)

    @app.task(base=SingletonTask, shared=False, name="explain.held")
    def held(tenant: str, n: int) -> int:
        return n

    set_at = time.time()
    hold_calls(app, "explain.held", {"tenant": "acme"}, seconds=30)
    try:
        with worker(app, concurrency=1):  # the worker reads the hold as it starts
            result = held.delay("acme", 3)
            assert poll(lambda: "held" in kinds(app, result.id), timeout=30), kinds(app, result.id)
            hold = next(d for d in explain(app, result.id).decisions if d.kind == "held")
            assert hold.details["hold"] == "tenant=acme"
            assert hold.details["until"] == pytest.approx(set_at + 30, abs=3)
            assert hold.time is not None and hold.details["looks_again"] >= hold.time
            assert "held by an operator's hold of its task's calls with tenant=acme until " in hold.text
            lift_calls(app, "explain.held", {"tenant": "acme"})
            assert result.get(timeout=30) == 3
    finally:
        lift_calls(app, "explain.held", {"tenant": "acme"})
    assert kinds(app, result.id)[0] == "acquired"  # newest first: it ran once lifted


def test_a_debounced_call_is_told_until_when_and_a_replaced_one_by_whom(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.debounce", debounce=1.0, lock_key=["doc"])
    def debounced(doc: int, version: int) -> int:
        return version

    with worker(app, concurrency=1):
        first = debounced.delay(1, 1)
        last = debounced.delay(1, 2)
        assert last.get(timeout=30) == 2
        with pytest.raises(DuplicateTaskError):
            first.get(timeout=30)
    sent, *_ = reversed(explain(app, last.id).decisions)
    assert sent.kind == "debounced" and "debounced until" in sent.text
    assert sent.details["due"] == pytest.approx(sent.time + 1.0, abs=0.01)  # type: ignore[operator]
    assert kinds(app, last.id)[:3] == ["acquired", "debounce_due", "debounced"]
    replaced = explain(app, first.id).decisions[0]
    assert replaced.kind == "replaced" and replaced.details["replaced_by"] == last.id
    assert f"replaced by a newer call {last.id} (SUCCESS)" in replaced.text


def test_keep_latest_tells_pending_and_replaced_calls(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.latest", keep_latest=True, lock_key=["doc"])
    def latest(doc: int, version: int) -> int:
        return version

    key = key_for(app, latest, 1, 0)
    locks.set(key, HOLDER, px=60_000)  # another run holds the key: calls wait as the latest
    with worker(app, concurrency=1):
        older = latest.delay(1, 1)
        assert poll(lambda: "pending" in kinds(app, older.id), timeout=20)
        pending = explain(app, older.id).decisions[0]
        assert pending.details["holder"] == HOLDER and HOLDER in pending.text
        newer = latest.delay(1, 2)
        assert poll(lambda: "replaced" in kinds(app, older.id), timeout=20)
        locks.delete(key)
        assert newer.get(timeout=30) == 2
    replaced = explain(app, older.id).decisions[0]
    assert replaced.kind == "replaced" and replaced.details["replaced_by"] == newer.id
    assert kinds(app, newer.id)[0] == "acquired"


def test_a_fair_call_is_told_its_lane_and_the_calls_waiting_there(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.fair", fair_key=["tenant"], lock=False)
    def work(tenant: str, n: int) -> int:
        return n

    calls = [work.delay("acme", n) for n in range(3)]  # no worker yet: the broker holds them
    [lane] = explain(app, calls[-1].id).decisions
    assert lane.kind == "lane" and lane.details["tenant"] == "acme"
    assert lane.details["lane"].startswith("celery.fair.")
    assert lane.details["in_lane"] == 3
    assert (
        f"sent to lane {lane.details['lane']} of tenant 'acme'; about 3 call(s) waiting in it now"
        in lane.text
    )
    with worker(app, concurrency=1, queues=["celery"]):
        assert [call.get(timeout=30) for call in calls] == [0, 1, 2]
    assert explain(app, calls[-1].id).decisions[0].details["in_lane"] == 0


def test_a_call_over_its_tenants_fair_cap_is_told_so(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()
    go = threading.Event()

    @app.task(
        base=SingletonTask, shared=False, name="explain.cap", fair_key=["tenant"], fair_cap=1, lock=False
    )
    def capped(tenant: str, n: int) -> int:
        go.wait(30)
        return n

    with worker(app, concurrency=2, queues=["celery"]):
        first = capped.delay("acme", 1)
        assert poll(lambda: "cap_slot" in kinds(app, first.id), timeout=20)
        second = capped.delay("acme", 2)
        assert poll(lambda: "over_fair_cap" in kinds(app, second.id), timeout=20)
        over = next(d for d in explain(app, second.id).decisions if d.kind == "over_fair_cap")
        assert over.details["tenant"] == "acme" and over.details["fair_cap"] == "1"
        assert "over tenant 'acme''s fair_cap of 1" in over.text
        go.set()
        assert first.get(timeout=30) == 1 and second.get(timeout=30) == 2
    assert kinds(app, second.id)[0] == "cap_slot"


def test_a_stale_copy_is_told_dropped(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.copy")
    def copied(n: int) -> int:
        return n

    task_id = str(uuid.uuid4())
    # The call was put off and its live copy is another one: this copy is stale.
    locks.set(copy_key("redislock", task_id), "live-token|", px=60_000)
    with worker(app, concurrency=1):
        copied.apply_async((8,), task_id=task_id, headers={COPY_HEADER: "stale-token"})
        assert poll(lambda: kinds(app, task_id) == ["copy_dropped"], timeout=20)
    [dropped] = explain(app, task_id).decisions
    assert dropped.details["copy"] == "stale-token" and "another copy is live" in dropped.text


def test_the_cli_explains_a_call_as_text_and_as_json(
    make_app: Callable[..., Celery],
    worker: Any,
    locks: redis.Redis,
    celery_cmd: Callable[..., Any],  # noqa: F811 (the fixture)
) -> None:
    app = make_app()

    @app.task(base=SingletonTask, shared=False, name="explain.cli")
    def skipped(n: int) -> int:
        return n

    locks.set(key_for(app, skipped, 9), HOLDER, px=60_000)
    with worker(app, concurrency=1):
        result = skipped.delay(9)
        with pytest.raises(DuplicateTaskError):
            result.get(timeout=20)
    celery = celery_cmd()
    text = celery("redislock", "explain", result.id)
    assert text.returncode == 0, text.stderr
    assert f"{result.id}: 1 decision(s), newest first" in text.stdout
    assert f"skipped as a duplicate of {HOLDER}" in text.stdout
    as_json = celery("redislock", "explain", result.id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    [decision] = json.loads(as_json.stdout)["decisions"]
    assert (
        decision["kind"] == "skipped" and decision["holder"] == HOLDER and decision["at"].endswith("+00:00")
    )
    off = celery_cmd(redislock_explain=False)("redislock", "explain", result.id)
    assert "the record of decisions is off" in off.stdout


def test_on_a_cluster_each_decision_is_recorded_in_its_keys_slot_and_explain_merges_them(
    make_app: Callable[..., Celery], worker: Any, cluster: Any
) -> None:
    app = make_app(redislock_url=cluster.url)

    @app.task(
        base=SingletonTask,
        shared=False,
        name="explain.cluster",
        global_rate_limit="2/s",
        rate_limit_key=["account"],
        lock_key=["account", "n"],
    )
    def limited(account: str, n: int) -> int:
        return n

    with worker(app, concurrency=1):
        results = [limited.delay("acme", n) for n in range(4)]
        assert sorted(result.get(timeout=60) for result in results) == list(range(4))
    last = explain(app, results[-1].id).decisions
    # The lock's record (in the lock key's slot, uncontended: the SET and its record pipelined)
    # and the limit's (in the limit's slot, by the script), merged newest first by their times
    # (whole ms; the uncontended one's read from its TTL left may come out 1 ms early).
    found = [d.kind for d in last]
    assert sorted(found[:2]) == ["acquired", "started"] and "postponed" in found, found
    acquired = next(d for d in last if d.kind == "acquired")
    assert acquired.details["still_held"] is False and acquired.time is not None
    assert all(a.time >= b.time for a, b in zip(last, last[1:]))  # type: ignore[operator]
