"""The countdown a put-off call is published with (``waits.broker_delay``): whole seconds, at
least one, where Celery sends countdowns through RabbitMQ's native delayed delivery (kombu cuts
them to whole seconds and refuses one under a second); as asked elsewhere."""

from __future__ import annotations

import pytest
from celery import Celery
from kombu import Queue

from celery_redislock.waits.broker_delay import countdown_for, shortest_broker_wait, whole_seconds

pytest.importorskip("celery.utils.quorum_queues", reason="native delayed delivery came with Celery 5.5")


def app_with(broker: str, **conf: object) -> Celery:
    app = Celery("delays", broker=broker, set_as_current=False)
    app.conf.update(conf)
    return app


@pytest.fixture
def quorum() -> Celery:
    return app_with(
        "amqp://127.0.0.1//", task_default_queue_type="quorum", task_default_exchange_type="topic"
    )


def test_quorum_queues_on_rabbitmq_get_whole_seconds_never_less_than_one(quorum: Celery) -> None:
    assert whole_seconds(quorum)
    assert shortest_broker_wait(quorum) == 1.0
    assert countdown_for(quorum, 0.3, 900) == 1.0
    assert countdown_for(quorum, 2.2, 900) == 3.0  # rounded up: never before it is due
    assert countdown_for(quorum, 0.0, 900) == 0.0  # at once: no countdown at all


def test_a_precise_wait_is_rounded_down_and_waited_out_in_the_worker(quorum: Celery) -> None:
    assert countdown_for(quorum, 2.7, 900, precise=True) == 2.0
    assert countdown_for(quorum, 0.5, 900, precise=True) == 1.0


def test_a_quorum_queue_declared_in_task_queues_counts_too() -> None:
    app = app_with(
        "pyamqp://127.0.0.1//", task_queues=[Queue("orders", queue_arguments={"x-queue-type": "quorum"})]
    )
    assert whole_seconds(app)


@pytest.mark.parametrize(
    ("broker", "conf"),
    [
        ("redis://127.0.0.1:1/0", {"task_default_queue_type": "quorum"}),  # not RabbitMQ: no quorum queues
        ("amqp://127.0.0.1//", {}),  # classic queues: the worker holds every countdown
    ],
)
def test_other_brokers_take_the_wait_as_asked_bounded_by_the_hop(
    broker: str, conf: dict[str, object]
) -> None:
    app = app_with(broker, **conf)
    assert not whole_seconds(app)
    assert countdown_for(app, 0.3, 900) == 0.3
    assert countdown_for(app, 2000.0, 900) == 900.0
    assert countdown_for(app, -1.0, 900) == 0.0
