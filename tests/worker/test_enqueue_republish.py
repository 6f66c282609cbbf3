"""Nothing accepted is dropped: what the worker or Celery re-publishes for a message already
accepted (a retry, a re-queued copy, a canvas member, a ``send_task`` message) is never refused by
the enqueue lock, and every path that needs the key uses the key the message carries (issue 21).

Real prefork worker subprocesses on a module written here, a real redis-server. Task bodies tell
the test they started (``started:<tag>`` on db 3) and block on ``gate:<tag>``: no sleeps.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery import Celery, chord, group
from celery.exceptions import ChordError

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.engine.keys import release_channel

from .conftest import (
    VISIBILITY_TIMEOUT,
    WorkerProcess,
    lock_keys,
    open_gate,
    poll,
    restore_visible,
    visibility_redelivery,
    wait_started,
    worker_module,
)

TASKS = """
from datetime import datetime, timedelta, timezone

ENQUEUE = dict(base=SingletonTask, bind=True, lock_on="enqueue")


@app.task(name="rep.held", lock_timeout=60, **ENQUEUE)
def held(self, tag, mapping=None):
    return hold(self, tag)


@app.task(name="rep.limited", lock_timeout=60, time_limit=1, **ENQUEUE)
def limited(self, tag, mapping=None):
    return hold(self, tag)


@app.task(name="rep.short", lock_timeout=3, **ENQUEUE)
def short(self, tag):
    return "ran " + tag


@app.task(name="rep.retrying", on_duplicate="retry", retry_countdown=0.3, max_retries=None, **ENQUEUE)
def retrying(self, tag):
    return hold(self, tag)


@app.task(name="rep.mapped", lock_timeout=30, **ENQUEUE)
def mapped(self, mapping, tag):
    if self.request.retries == 0:
        raise self.retry(countdown=0.2)
    return hold(self, tag)


@app.task(name="rep.flaky", on_duplicate="wait", acquire_timeout=60, **ENQUEUE)
def flaky(self, tag):
    # The first execution of a tag retries once its gate opens; every other one just returns.
    if coord.set("retried:" + tag, self.request.id, nx=True):
        hold(self, tag)
        raise self.retry(countdown=0.5)
    return self.request.id


@app.task(base=SingletonTask, bind=True, name="rep.handover", release_on_retry=False,
          lock_timeout=2, default_retry_delay=0)
def handover(self, tag):
    if self.request.retries == 0:
        raise self.retry(eta=datetime.now(timezone.utc) + timedelta(seconds=6))
    return hold(self, tag)


@app.task(name="rep.collect")
def collect(values):
    return values
"""

#: A second worker that shares the first one's node name, as a container on another host does:
#: the first worker's processes live in a PID namespace it cannot see (their pids, listed by the
#: test on hidden-pids, do not exist for it).
LATE = f"""
import os as _os

app.conf.broker_transport_options = {{"visibility_timeout": {VISIBILITY_TIMEOUT}}}
_kill = _os.kill
_hide = bool(_os.environ.get("REP_HIDE_PIDS"))


def _kill_in_own_namespace(pid, sig):
    if _hide and sig == 0 and coord.sismember("hidden-pids", pid):
        raise ProcessLookupError(pid)
    return _kill(pid, sig)


_os.kill = _kill_in_own_namespace


@app.task(base=SingletonTask, bind=True, name="rep.late", acks_late=True, lock_timeout=3)
def late(self, tag):
    return hold(self, tag)
"""


@pytest.fixture
def client(make_app: Callable[..., Celery]) -> Celery:
    """The caller's app: the enqueue-locked tasks as the worker has them (name, signature, options)."""
    app = make_app()
    enqueue: dict[str, Any] = {"base": SingletonTask, "shared": False, "lock_on": "enqueue"}

    @app.task(name="rep.held", lock_timeout=60, **enqueue)
    def held(tag: str, mapping: Any = None) -> None: ...

    @app.task(name="rep.limited", lock_timeout=60, **enqueue)
    def limited(tag: str, mapping: Any = None) -> None: ...

    @app.task(name="rep.short", lock_timeout=3, **enqueue)
    def short(tag: str) -> None: ...

    @app.task(name="rep.mapped", lock_timeout=30, **enqueue)
    def mapped(mapping: Any, tag: str) -> None: ...

    @app.task(name="rep.flaky", on_duplicate="wait", **enqueue)
    def flaky(tag: str) -> None: ...

    @app.task(name="rep.collect", shared=False)
    def collect(values: Any) -> None: ...

    return app


@pytest.fixture
def start(urls: dict[str, str], worker_process: Callable[..., WorkerProcess]) -> Callable[..., WorkerProcess]:
    return lambda *args: worker_process(worker_module(urls, "rep", TASKS), *args)


def only_lock(locks: redis.Redis) -> tuple[str, str, int]:
    """The one lock held: key, holder id, PTTL."""
    [key] = lock_keys(locks)
    holder = locks.get(key)
    assert holder is not None
    return key.decode(), holder.decode(), locks.pttl(key)


def after(seconds: float) -> None:
    """Let ``seconds`` of wall time pass: what a TTL or an expiry is measured against."""
    deadline = time.monotonic() + seconds
    poll(lambda: time.monotonic() > deadline, seconds + 1)


# -- case 1: a re-queued redelivered copy ------------------------------------------------------


def test_a_copy_requeued_while_a_dead_worker_holds_its_lock_runs_once_the_lock_expires(
    client: Celery, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    result = client.tasks["rep.short"].delay("d")
    key, holder, _ = only_lock(locks)
    assert holder == f"{result.id}@queued"
    # A worker on another host took it over and died there: its lock outlives it by the TTL.
    # No TTL until the copy has come to the worker, whose start may take longer than the TTL on
    # a busy machine: the copy would find the lock gone and run at once.
    dead = f"{result.id}@celery@deadhost:4242:1"
    locks.set(key, dead)
    proc = start("-c", "1")
    requeued = f"Re-queued redelivered rep.short[{result.id}]"
    assert poll(lambda: requeued in proc.log(), 15), proc.log()
    assert locks.get(key) == dead.encode()
    locks.pexpire(key, 1000)  # the copy, re-queued meanwhile, runs once it expires

    assert result.get(timeout=30) == "ran d"
    log = proc.log()
    assert "Not sending duplicate" not in log
    assert poll(lambda: lock_keys(locks) == [], 5)


# -- case 2: on_duplicate="retry" ------------------------------------------------------------


def test_a_retried_duplicate_is_published_again_and_runs_after_the_holder(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    proc = start("-c", "2")
    first = client.send_task("rep.retrying", args=["r"])
    wait_started(coord, "r")
    # Sent past the enqueue lock (send_task): a duplicate at the worker, which retries it.
    second = client.send_task("rep.retrying", args=["r"])
    retrying = f"Retrying duplicate rep.retrying[{second.id}]"
    assert poll(lambda: proc.log().count(retrying) >= 2, 15), proc.log()

    open_gate(coord, "r")
    assert first.get(timeout=10) == "done r"
    assert second.get(timeout=15) == "done r"  # not left in RETRY for ever
    assert [task_id for _, task_id in wait_started(coord, "r", count=2)] == [first.id, second.id]
    assert "Not sending duplicate" not in proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5)


# -- case 3: canvas members whose ids were frozen --------------------------------------------


def test_identical_members_of_a_group_both_get_a_result(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start("-c", "2")
    held = client.tasks["rep.held"]
    result = group(held.s("g"), held.s("g")).apply_async()
    [(_, ran)] = wait_started(coord, "g")
    [skipped] = [child for child in result.results if child.id != ran]
    with pytest.raises(DuplicateTaskError, match=ran):  # names the holder, at once
        skipped.get(timeout=10)
    open_gate(coord, "g")
    values = result.get(timeout=10, propagate=False)
    assert sorted(map(str, values)) == sorted(["done g", str(skipped.result)])
    assert len(wait_started(coord, "g")) == 1
    assert poll(lambda: lock_keys(locks) == [], 5)


def test_a_chord_of_identical_members_ends_instead_of_hanging(
    client: Celery, coord: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start("-c", "2")
    held = client.tasks["rep.held"]
    result = chord([held.s("c"), held.s("c")])(client.tasks["rep.collect"].s())
    [(_, ran)] = wait_started(coord, "c")
    # The gate opens only once the other member has been refused: opened sooner, the first
    # member could end before the second reached its worker, and then both would run.
    [skipped] = [member for member in result.parent.results if member.id != ran]
    with pytest.raises(DuplicateTaskError, match=ran):
        skipped.get(timeout=10)
    open_gate(coord, "c")
    with pytest.raises(DuplicateTaskError):
        result.get(timeout=15)
    assert poll(lambda: result.state == "FAILURE", 5)
    assert isinstance(result.result, ChordError) and "DuplicateTaskError" in str(result.result)


# -- case 4: the retry keeps the key its message carries ---------------------------------------


def test_a_retry_keeps_the_key_the_caller_locked_even_when_json_changed_the_arguments(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start("-c", "2")
    mapped = client.tasks["rep.mapped"]
    first = mapped.delay({1: "a"}, "m")  # JSON makes the worker's argument {"1": "a"}
    [key] = lock_keys(locks)
    [(_, ran)] = wait_started(coord, "m")  # the retried run
    assert ran == first.id
    assert lock_keys(locks) == [key]
    assert locks.get(key).decode().startswith(f"{first.id}@")  # type: ignore[union-attr]
    # So an identical call is still the running one, not a second body beside it.
    assert mapped.delay({1: "a"}, "m").id == first.id
    open_gate(coord, "m")
    assert first.get(timeout=10) == "done m"
    assert len(wait_started(coord, "m")) == 1


# -- case 5: the parent frees the key the message carries --------------------------------------


@pytest.mark.parametrize("end", ["revoke", "kill", "time-limit"])
def test_the_parent_frees_the_carried_key_of_a_terminated_or_dead_child(
    end: str, client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    proc = start("-c", "1")
    name = "rep.limited" if end == "time-limit" else "rep.held"  # killed after 1 s
    client.tasks[name].apply_async(("p",), {"mapping": {1: "a"}})  # {"1": "a"} at the worker
    [(child, task_id)] = wait_started(coord, "p")
    key, holder, pttl = only_lock(locks)
    assert holder.startswith(f"{task_id}@") and pttl > 50_000
    if end == "revoke":  # SIGKILL: the child cannot release anything itself
        client.control.revoke(task_id, terminate=True, signal="SIGKILL")
    elif end == "kill":
        os.kill(child, signal.SIGKILL)
    assert poll(lambda: lock_keys(locks) == [], 10), (locks.get(key), proc.log())
    released = f"Released lock {key} of {name}[{task_id}]"
    assert poll(lambda: released in proc.log(), 5), proc.log()


# -- case 6: a message Celery discards frees its queued lock -----------------------------------


@pytest.mark.redis_broker(
    "the worker receives an expired message and discards it; RabbitMQ drops it in the queue, where the lock's expiry bound frees it (test_enqueue_expiry)"
)
def test_an_expired_message_frees_its_queued_lock(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    held = client.tasks["rep.held"]
    expired = held.apply_async(("x",), expires=1)
    assert lock_keys(locks) != []
    after(1.5)
    proc = start("-c", "1")
    discarded = f"Discarding revoked task: rep.held[{expired.id}]"
    assert poll(lambda: discarded in proc.log(), 10), proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5), proc.log()
    again = held.delay("x")
    assert again.id != expired.id  # an identical call is sent, not answered by it
    open_gate(coord, "x")
    assert again.get(timeout=15) == "done x"  # and runs


def test_a_message_revoked_before_it_runs_frees_its_queued_lock(
    client: Celery, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    proc = start("-c", "1")
    revoked = client.tasks["rep.held"].apply_async(("v",), countdown=3)
    assert poll(lambda: f"Task rep.held[{revoked.id}] received" in proc.log(), 10), proc.log()
    _, holder, pttl = only_lock(locks)
    assert holder == f"{revoked.id}@queued" and pttl > 3_600_000  # queued_timeout + countdown
    client.control.revoke(revoked.id)
    discarded = f"Discarding revoked task: rep.held[{revoked.id}]"
    assert poll(lambda: discarded in proc.log(), 15), proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5), proc.log()


# -- case 7: a hand-over lasts until a retry due at an eta -------------------------------------


def test_a_hand_over_to_a_retry_with_an_eta_lasts_until_it_is_due(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start("-c", "2")
    result = client.send_task("rep.handover", args=["h"])
    assert poll(
        lambda: lock_keys(locks) and locks.get(lock_keys(locks)[0]) == f"{result.id}@handover".encode()
    )
    handed_at = time.monotonic()
    _, _, pttl = only_lock(locks)
    assert pttl > 5_000  # lock_timeout (2 s) + the 6 s until the eta, not lock_timeout alone
    after(3 - (time.monotonic() - handed_at))  # past lock_timeout, before the eta
    duplicate = client.send_task("rep.handover", args=["h"])
    with pytest.raises(DuplicateTaskError, match=f"{result.id}@handover"):
        duplicate.get(timeout=10)
    open_gate(coord, "h")
    assert result.get(timeout=20) == "done h"
    assert [task_id for _, task_id in wait_started(coord, "h")] == [result.id]


# -- the window between a retry's release and its re-publish -----------------------------------


def test_a_retry_hands_its_lock_to_its_queued_message_so_a_waiter_cannot_refuse_it(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    proc = start("-c", "2")
    first = client.tasks["rep.flaky"].delay("w")
    wait_started(coord, "w")
    key, _, _ = only_lock(locks)
    waiter = client.send_task("rep.flaky", args=["w"])  # past the enqueue lock: waits at the worker
    assert poll(lambda: locks.pubsub_numsub(release_channel(key))[0][1] == 1, 10), proc.log()
    with key_events(locks, key) as events:
        open_gate(coord, "w")  # the first retries: a release would wake the waiter at once
        assert waiter.get(timeout=15) == waiter.id
        assert first.get(timeout=15) == first.id  # the retry was published and ran
        # The retry moved the lock to its queued message in one step: the key was never free.
        assert next(e for e in events() if e in ("set", "del")) == "set"
    assert "Not sending duplicate" not in proc.log()
    assert poll(lambda: lock_keys(locks) == [], 5)


@contextmanager
def key_events(client: redis.Redis, key: str) -> Iterator[Callable[[], list[str]]]:
    """Redis keyspace notifications of ``key`` (set, del, expire, ...) while in the block:
    yields a function returning those received so far, in order."""
    client.config_set("notify-keyspace-events", "Kg$")
    pubsub = client.pubsub()
    db = client.connection_pool.connection_kwargs.get("db", 0)
    pubsub.subscribe(f"__keyspace@{db}__:{key}")
    received: list[str] = []

    def events() -> list[str]:
        while (message := pubsub.get_message(timeout=0.1)) is not None:
            if message["type"] == "message":
                received.append(message["data"].decode())
        return received

    try:
        yield events
    finally:
        pubsub.close()
        client.config_set("notify-keyspace-events", "")


# -- a task id containing "@" ------------------------------------------------------------------


def test_a_task_id_containing_an_at_sign_is_the_one_an_identical_call_returns(
    client: Celery, coord: redis.Redis, locks: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start("-c", "1")
    held = client.tasks["rep.held"]
    first = held.apply_async(("at",), task_id="job@42")
    wait_started(coord, "at")
    second = held.delay("at")
    assert second.id == "job@42"
    open_gate(coord, "at")
    assert second.get(timeout=10) == "done at"
    assert poll(lambda: lock_keys(locks) == [], 5)
    assert first.state == "SUCCESS"


# -- case 8: two workers sharing one node name ---------------------------------------------------


@visibility_redelivery
def test_a_worker_sharing_a_node_name_does_not_take_over_a_live_holder_it_cannot_see(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = worker_module(urls, "rep", TASKS + LATE)
    one = worker_process(source, "-c", "1", "-n", "shared@node")
    caller = make_app(broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})
    result = caller.send_task("rep.late", args=["n"])
    [(child, task_id)] = wait_started(coord, "n")
    coord.sadd("hidden-pids", one.pid, child)
    monkeypatch.setenv("REP_HIDE_PIDS", "1")  # for the second worker only
    other = worker_process(source, "-c", "1", "-n", "shared@node")

    requeued = f"Re-queued redelivered rep.late[{task_id}]"

    def given_to_other() -> bool:
        restore_visible(caller)  # the copy, given out again after the visibility timeout
        return requeued in other.log() or len(coord.lrange("started:n", 0, -1)) > 1

    assert poll(given_to_other, 30, interval=0.2), other.log()
    assert [tid for _, tid in wait_started(coord, "n")] == [task_id]  # never two bodies at once
    open_gate(coord, "n")
    assert result.get(timeout=15) == "done n"
    assert len(wait_started(coord, "n")) == 1
