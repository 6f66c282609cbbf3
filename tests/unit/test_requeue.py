"""The unlimited re-queue (``waits.put_off.requeue``): re-published like a retry, same task id, not
bounded by max_retries, and the task object left as it was found, where Celery's ``retry()``
leaves the bound it was given (``override_max_retries``) for ``autoretry_for`` to read later."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.waits.put_off import requeue


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("requeue", broker="memory://", backend="cache+memory://", set_as_current=False)
    yield app
    app.close()


def running(app: Celery, **attributes: Any) -> Any:
    """A task bound to ``app`` as a worker runs it: a request on its stack, out of retries."""

    # shared=False: a shared task would be added to every app made after it, in other tests too.
    @app.task(
        base=SingletonTask, shared=False, bind=True, max_retries=2, autoretry_for=(KeyError,), **attributes
    )
    def work(self: Any) -> None:
        return None

    work.push_request(id="t-1", retries=5, is_eager=False, called_directly=False, delivery_info={})
    return work


def published(app: Celery) -> list[Any]:
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue("celery")
        messages = []
        while queue.qsize():
            message = queue.get(timeout=1)
            messages.append(message)
            message.ack()
        queue.close()
    return messages


def test_a_requeue_is_published_past_max_retries_and_leaves_no_bound_on_the_task(app: Celery) -> None:
    task = running(app)
    try:
        requeue(task, countdown=0, throw=False)
    finally:
        task.pop_request()
    [message] = published(app)
    assert message.headers["id"] == "t-1" and message.headers["retries"] == 6
    # Celery's retry() set override_max_retries=sys.maxsize on the task: autoretry_for would
    # then retry this task's later runs in this process for ever.
    assert "override_max_retries" not in vars(task)
    assert task.max_retries == 2


def test_a_requeue_puts_back_a_bound_the_task_had(app: Celery) -> None:
    task = running(app)
    task.override_max_retries = 4  # as autoretry_for's own retry leaves it mid-call
    try:
        requeue(task, countdown=0, throw=False)
    finally:
        task.pop_request()
    assert vars(task)["override_max_retries"] == 4 != sys.maxsize


def test_a_postponed_call_keeps_its_retries(app: Celery) -> None:
    published(app)  # what earlier tests left in the process-wide memory broker
    task = running(app)
    try:
        requeue(task, countdown=0, throw=False, keep_retries=True)
        assert task.request.retries == 5  # the running request is left as it was
    finally:
        task.pop_request()
    [message] = published(app)
    assert message.headers["id"] == "t-1" and message.headers["retries"] == 5
