"""The waiting paths on an SQS broker: kombu's SQS transport against moto's SQS server (a local
emulation, not AWS), locks, results and the tests' records on the session's redis-server.

Celery keeps a call with a countdown (an ETA) unacknowledged in the worker until it is due, and
SQS gives a message received and not deleted out again once its visibility timeout passes: the
first test shows moto does so. The others run, on prefork workers, each path that makes a call
wait: the lock's skipped duplicate, ``on_duplicate="retry"`` (a retry's countdown),
``debounce`` (a countdown at send), ``global_rate_limit``'s postponed calls (hops of at most
``redislock_max_postpone``, half the visibility timeout, so a call waiting three visibility
timeouts is not given out again) and ``fair_cap``'s re-queue (a countdown on a lane queue), and
assert that no call is lost or run twice. Remote control (``inspect``, ``revoke``) needs a
fanout exchange, which kombu's SQS transport has only with SNS: not used here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll
from tests.harness.sqs import MotoServer, sqs_missing

from .conftest import open_gate, skip_duplicates, wait_started, worker_module
from .mode_harness import ModeTask, node, skipped
from .test_fair_share import HELD_BODY as FAIR_HELD_BODY
from .test_fair_share import Sent, drain

pytestmark = pytest.mark.skipif(sqs_missing() is not None, reason=sqs_missing() or "")

#: Seconds a received message stays invisible: short, so a test sees what comes after it, long
#: enough that a loaded machine acknowledges a call it runs well within it.
VISIBILITY = 4


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@dataclass(frozen=True)
class SQSBroker:
    """A test's broker: moto's SQS, its queues under a prefix of the test's own."""

    urls: dict[str, str]
    transport: dict[str, Any]
    make_app: Callable[..., Celery]
    worker_process: Callable[..., WorkerProcess]

    def conf(self, **more: Any) -> dict[str, Any]:
        return {"broker_url": self.urls["broker"], "broker_transport_options": self.transport, **more}

    def app(self, **more: Any) -> Celery:
        return self.make_app(**self.conf(**more))

    def settings(self, **more: Any) -> str:
        """Worker-module lines: the app on this broker (``more``: settings), the rate limit's
        hops (logged at DEBUG) in its log."""
        return (
            "import logging\n"
            'logging.getLogger("celery_redislock.gates").setLevel(logging.DEBUG)\n'
            f"app.conf.update({self.conf(**more)!r})\n"
        )

    def start(self, task: ModeTask, *args: str, **more: Any) -> WorkerProcess:
        """A prefork worker subprocess running ``task`` on this broker (``more``: settings)."""
        return task.start(self.worker_process, self.urls, *args, module=self.settings(**more))


@pytest.fixture
def sqs(
    moto_server: MotoServer,
    urls: dict[str, str],
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> SQSBroker:
    prefix = f"t{uuid.uuid4().hex[:10]}-"
    return SQSBroker(
        {**urls, "broker": moto_server.broker_url()},
        moto_server.transport(prefix, VISIBILITY),
        make_app,
        worker_process,
    )


def ran(coord: redis.Redis, key: str) -> list[str]:
    return [entry.decode() for entry in coord.lrange(key, 0, -1)]


RECORD = 'coord.rpush("ran:" + tag, n)\nreturn n\n'


def test_moto_gives_a_message_held_past_its_visibility_timeout_out_again(
    sqs: SQSBroker, coord: redis.Redis
) -> None:
    # Why the waiting paths bound their countdowns: a plain task whose countdown outlasts the
    # visibility timeout is held by the worker, given out again by SQS, and run twice.
    source = worker_module(sqs.urls, "sqs_plain", sqs.settings())
    source += '\n@app.task(name="sqs.plain")\ndef plain(tag, n):\n    coord.rpush("ran:" + tag, n)\n'
    proc = sqs.worker_process(source, "-c", "1", "-n", node("sqs-plain"))
    sqs.app().send_task("sqs.plain", args=("plain", 0), countdown=VISIBILITY + 2)
    assert poll(lambda: coord.llen("ran:plain") == 2, 30, interval=0.2), proc.log()[-3000:]
    assert ran(coord, "ran:plain") == ["0", "0"]


def test_a_duplicate_of_a_running_call_is_skipped(sqs: SQSBroker, coord: redis.Redis) -> None:
    task = ModeTask("sqs.locked", "tag", "return hold(self, tag)")
    proc = sqs.start(task, "-c", "2", "-n", node("sqs-locked"))
    app = sqs.app()
    sender = task.sender(app)
    first = sender.delay("one")
    wait_started(coord, "one")
    skip_duplicates(app, task.name, "one", 2)
    open_gate(coord, "one", times=1)
    assert first.get(timeout=20) == "done one"
    assert len(wait_started(coord, "one")) == 1, proc.log()[-3000:]


def test_on_duplicate_retry_runs_the_duplicate_once_the_holder_is_done(
    sqs: SQSBroker, coord: redis.Redis
) -> None:
    body = 'coord.rpush("ran:" + tag, n)\nreturn hold(self, tag) if n == 0 else n\n'
    options = {"lock_key": ["tag"], "on_duplicate": "retry", "retry_countdown": 0.5, "max_retries": 60}
    task = ModeTask("sqs.retried", "tag, n", body, options)
    proc = sqs.start(task, "-c", "2", "-n", node("sqs-retry"))
    sender = task.sender(sqs.app())
    holder = sender.delay("doc", 0)
    wait_started(coord, "doc")
    duplicate = sender.delay("doc", 1)
    # Retried at least twice while the holder runs, then let it end.
    assert poll(lambda: proc.log().count(f"sqs.retried[{duplicate.id}] retry") >= 2, 20), proc.log()[-3000:]
    assert ran(coord, "ran:doc") == ["0"]
    open_gate(coord, "doc", times=1)
    assert holder.get(timeout=20) == "done doc"
    assert duplicate.get(timeout=20) == 1
    # Two visibility timeouts more: a copy given out again would run.
    assert not poll(lambda: coord.llen("ran:doc") > 2, 2 * VISIBILITY, interval=0.3)
    assert ran(coord, "ran:doc") == ["0", "1"]


def test_a_debounced_burst_runs_once(sqs: SQSBroker, coord: redis.Redis) -> None:
    options = {"lock_key": ["tag"], "debounce": 1.0, "retry_countdown": 0.2}
    task = ModeTask("sqs.debounced", "tag, n", RECORD, options)
    proc = sqs.start(task, "-c", "2", "-n", node("sqs-debounce"))
    sender = task.sender(sqs.app())
    burst = [sender.delay("doc", n) for n in range(5)]
    last = burst[-1]
    assert last.get(timeout=20) == 4, proc.log()[-3000:]
    for result in burst[:-1]:
        assert skipped(result).holder_task_id == last.id
    assert not poll(lambda: coord.llen("ran:doc") > 1, 2 * VISIBILITY, interval=0.3)
    assert ran(coord, "ran:doc") == ["4"]


def test_rate_limited_calls_waiting_past_the_visibility_timeout_run_once(
    sqs: SQSBroker, coord: redis.Redis
) -> None:
    # 1/s: the last of 12 calls waits 11 s, nearly three visibility timeouts; each hop is at
    # most half of one (redislock_max_postpone unset: read from the transport's options).
    options = {"global_rate_limit": "1/s", "rate_limit_key": ["tag"]}
    task = ModeTask("sqs.rated", "tag, n", RECORD, options)
    proc = sqs.start(task, "-c", "2", "-n", node("sqs-rate"))
    sender = task.sender(sqs.app())
    results = [sender.delay("acme", n) for n in range(12)]
    assert sorted(result.get(timeout=60) for result in results) == list(range(12)), proc.log()[-3000:]
    assert not poll(lambda: coord.llen("ran:acme") > 12, 2 * VISIBILITY, interval=0.3)
    assert sorted(int(n) for n in ran(coord, "ran:acme")) == list(range(12))
    log = proc.log()
    # Each call postponed once but the first (a send slower than a second, on a loaded machine,
    # may let one more start at once).
    assert 9 <= log.count("Rate-limited sqs.rated[") <= 11, log[-3000:]
    assert "Re-queued rate-limited sqs.rated[" in log  # waits past 2 s were made of hops
    assert "Dropped copy of rate-limited" not in log  # SQS gave out no postponed call again


def test_a_fair_capped_tenant_waits_and_runs_each_call_once(sqs: SQSBroker, coord: redis.Redis) -> None:
    options = {"fair_key": ["tenant"], "fair_cap": 1}
    task = ModeTask("sqs.capped", "tenant, n", FAIR_HELD_BODY.replace("0.05", "0.3"), options)
    proc = sqs.start(task, "-c", "3", "-n", node("sqs-cap"))
    sender = task.sender(sqs.app())
    calls = [("A", n) for n in range(6)] + [("B", n) for n in range(2)]
    sent = [Sent(sender.delay(*call), call) for call in calls]
    drain(coord, sent, len(calls))
    # Three processes, at most one of A's calls at once: the cap, not the pool, bounded them.
    assert {int(peak) for peak in coord.lrange("peaks:A", 0, -1)} == {1}
    assert coord.llen("peaks:A") == 6 and coord.llen("peaks:B") == 2
    assert "Capped sqs.capped[" in proc.log()  # calls came over the cap and were re-queued
    assert not poll(lambda: coord.llen("starts") > len(calls), 2 * VISIBILITY, interval=0.3)
