"""Redis unreachable while a call is sent: every sender counts it and says so in one WARNING,
and sends the call anyway (nothing lost), unless the call needs its lock at send and the task
says ``on_redis_error="fail"``. One mechanism serves them all (``sending.unreachable_at_send``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.engine.counting import add_count_listener, remove_count_listener
from celery_redislock.errors import LockUnavailableError
from celery_redislock.modes.keep_latest import PENDING_HEADER

SENDERS = {
    "enqueue": ({"lock_on": "enqueue"}, "celery_redislock.integration.sending", "without an enqueue lock"),
    "debounce": ({"debounce": 30}, "celery_redislock.modes.debounce", "undebounced"),
    "keep_latest": ({"keep_latest": True}, "celery_redislock.modes.keep_latest", "unrecorded as the latest"),
}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("unreachable", broker="memory://", set_as_current=False)
    app.conf.redislock_url = f"redis://127.0.0.1:{closed_port()}/0"
    yield app


@pytest.fixture
def counts() -> Iterator[list[str]]:
    seen: list[str] = []

    def listener(name: str, by: int, task: str | None) -> None:
        seen.extend([name] * by)

    add_count_listener(listener)
    yield seen
    remove_count_listener(listener)


def published(app: Celery, queue: str) -> Any:
    """The one message published to ``queue`` of the app's in-memory broker."""
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue(queue).get(timeout=5)
        message.ack()
        return message


@pytest.mark.parametrize("sender", sorted(SENDERS))
def test_a_call_sent_while_redis_is_down_is_sent_counted_and_warned_of(
    sender: str, app: Celery, counts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    options, logger, how = SENDERS[sender]
    queue = f"unreachable-{sender}"

    @app.task(base=SingletonTask, shared=False, name=f"unreachable.{sender}", lock_key=[], **options)
    def run() -> None:
        pass

    with caplog.at_level("WARNING", logger=logger):
        result = app.tasks[run.name].apply_async(queue=queue)
    message = published(app, queue)
    assert message.headers["id"] == result.id
    assert counts == ["redis_errors"]
    [record] = [r for r in caplog.records if r.name == logger]
    assert record.getMessage().startswith(f"Sending unreachable.{sender}[{result.id}] {how}: Redis at ")
    assert PENDING_HEADER not in message.headers  # keep_latest: its worker records it
    if sender == "debounce":  # sent with the full delay: it runs when due
        assert message.headers["eta"] is not None


def test_a_call_locked_at_enqueue_that_must_fail_is_not_sent(app: Celery, counts: list[str]) -> None:
    @app.task(
        base=SingletonTask, shared=False, name="unreachable.fail", lock_on="enqueue", on_redis_error="fail"
    )
    def run() -> None:
        pass

    with pytest.raises(LockUnavailableError):
        app.tasks[run.name].apply_async(queue="unreachable-fail")
    assert counts == ["redis_errors"]
    with app.connection_for_read() as connection:
        assert connection.SimpleQueue("unreachable-fail").qsize() == 0
