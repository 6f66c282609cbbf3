"""A fair queue's lanes are declared as the queue is (issue 50, point 6): a quorum queue with a
dead-letter exchange has quorum lanes with it, the app-wide ``task_default_queue_type`` reaches
the default queue's lanes, and a priority queue's lanes order calls by priority. Through real
workers: on RabbitMQ the declarations are read back from its management API, and a call capped
on a quorum queue of a topic exchange comes back to its lane through Celery's native delayed
delivery, whose exchange the worker bound the lanes to."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue  # noqa: F401  # the declarations' text, eval()ed as the workers run it

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import WorkerProcess, poll
from tests.harness import RabbitMQServer

from .conftest import open_gate, wait_started, worker_module
from .mode_harness import Deployment, ModeTask, node

#: The orders queue of the issue: quorum, dead-lettered, on a topic exchange (what Celery's native
#: delayed delivery needs), as the worker module and the sender both declare it.
ORDERS = (
    'Queue("orders", Exchange("orders", type="topic"), "orders", '
    'queue_arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"})'
)
#: The settings each case gives the worker module and the sender: the queue's declaration, and
#: the arguments its lanes must have.
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "task_queues": (
        f'app.conf.task_queues = [{ORDERS}]\napp.conf.task_routes = {{"lanes.work": {{"queue": "orders"}}}}',
        {
            "task_queues": [eval(ORDERS)],
            "task_routes": {"lanes.work": {"queue": "orders"}},
        },  # the very text the worker module runs
        {"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"},
    ),
    "task_default_queue_type": (
        'app.conf.task_default_queue_type = "quorum"',
        {"task_default_queue_type": "quorum"},
        {"x-queue-type": "quorum"},
    ),
}

#: A call that holds until the test opens its tenant's gate (the preamble's ``hold``).
HOLDING = """
from kombu import Exchange, Queue
{conf}


@app.task(base=SingletonTask, bind=True, name="lanes.work", fair_key=["tenant"], fair_lanes=2,
          fair_cap=1, lock=False)
def work(self, tenant, n):
    return hold(self, tenant)
"""


@pytest.fixture
def rabbitmq(
    urls: dict[str, str],
    rabbitmq_url: str,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> Deployment:
    """The test's servers with RabbitMQ as the broker, whatever ``--broker`` says."""
    return Deployment(
        {**urls, "broker": rabbitmq_url}, functools.partial(make_app, broker_url=rabbitmq_url), worker_process
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_lanes_keep_their_queue_declaration_on_rabbitmq(
    case: str, rabbitmq: Deployment, rabbitmq_server: RabbitMQServer, coord: redis.Redis
) -> None:
    conf, settings, arguments = CASES[case]
    queue = "orders" if case == "task_queues" else "celery"
    source = HOLDING.format(conf=conf)
    proc = rabbitmq.worker_process(
        worker_module(rabbitmq.urls, "lanes_declared", source), "-c", "2", "-n", node("declared")
    )
    app = rabbitmq.app(**settings)
    sender = app.task(
        base=SingletonTask,
        shared=False,
        name="lanes.work",
        fair_key=["tenant"],
        fair_lanes=2,
        fair_cap=1,
        lock=False,
    )(_never)
    first = sender.delay("A", 1)
    wait_started(coord, "A")
    # Over A's cap of 1: re-published to its lane with a countdown, which on a quorum queue of a
    # topic exchange goes through Celery's delayed-delivery exchanges and comes back to the lane
    # only by the binding the worker made at its start.
    second = sender.delay("A", 2)
    url = rabbitmq.urls["broker"]
    for lane in (f"{queue}.fair.0", f"{queue}.fair.1"):
        info = rabbitmq_server.queue_info(url, lane)
        assert (info["type"], info["durable"]) == ("quorum", True), info
        assert info["arguments"] == arguments, info
    if case == "task_queues":
        bound = {b["destination"] for b in rabbitmq_server.bindings_from(url, "celery_delayed_delivery")}
        assert {"orders", "orders.fair.0", "orders.fair.1"} <= bound, bound
    assert poll(lambda: "Capped lanes.work" in proc.log(), 30), proc.log()
    open_gate(coord, "A", times=2)
    assert first.get(timeout=30) == "done A"
    assert second.get(timeout=60) == "done A"


def _never(tenant: str, n: int) -> None:
    raise AssertionError("runs in the worker only")


#: Calls that record the order they start in.
ORDERED = ModeTask(
    "lanes.prio",
    "tenant, n",
    'coord.rpush("starts", n)\nreturn n',
    {"fair_key": ["tenant"], "fair_lanes": 2, "lock": False},
)
PRIO = 'Queue("prio", Exchange("prio"), "prio", max_priority=9)'
ROUTES = {"lanes.prio": {"queue": "prio"}}


def test_a_priority_queues_lanes_serve_the_urgent_call_first(
    request: pytest.FixtureRequest, deployment: Deployment, coord: redis.Redis
) -> None:
    """Five calls of one tenant, then an urgent one, all in one lane before the worker starts:
    the urgent one starts first, as in the queue itself. RabbitMQ orders by a priority queue's
    x-max-priority (highest first), which a lane declared without it lacks; kombu's Redis
    transport orders every queue by priority steps (0 first), whatever its declaration."""
    rabbitmq = request.config.getoption("broker").startswith("rabbitmq")
    low, urgent = (0, 9) if rabbitmq else (9, 0)
    app = deployment.app(task_queues=[eval(PRIO)], task_routes=ROUTES)
    sender = ORDERED.sender(app)
    sent = [sender.apply_async(("A", n), priority=low) for n in range(5)]
    sent.append(sender.apply_async(("A", 99), priority=urgent))
    deployment.start(
        ORDERED,
        "-c",
        "1",
        "--prefetch-multiplier",
        "1",
        "-n",
        node("prio"),
        module=f"from kombu import Exchange, Queue\napp.conf.task_queues = [{PRIO}]\napp.conf.task_routes = {ROUTES!r}\n",
    )
    assert sorted(result.get(timeout=60) for result in sent) == [0, 1, 2, 3, 4, 99]
    assert int(coord.lindex("starts", 0) or -1) == 99, coord.lrange("starts", 0, -1)
