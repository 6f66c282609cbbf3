"""Fair share's options (``fair_key``, ``fair_lanes``, ``fair_weights``, ``fair_cap``): valid on
the task, in ``redislock_options`` and in ``redislock_queues``; a bad value named with where it
came from; the combinations refused naming both options; a tenant's name and weight; the lanes a
worker consumes."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery, Task

import celery_redislock.gates
import celery_redislock.modes  # noqa: F401  (registers the modes and the gates)
from celery_redislock import OptionError, SingletonTask
from celery_redislock.config.options import resolve, validate
from celery_redislock.gates.fair_share import GATE, lane_route
from celery_redislock.gates.task_holds import GATE as HOLDS
from celery_redislock.integration.bootstep import gate_queues
from celery_redislock.integration.queues import base_queue, consumed_queue, destination, lane_name
from celery_redislock.integration.runtime import reset_runtime, runtime_for
from celery_redislock.integration.sending import send_plan

TASK = "task 'proj.sync'"


@pytest.mark.parametrize(
    ("layer", "option", "problem"),
    [
        ({"fair_key": "account"}, "fair_key", "write ['account']"),
        ({"fair_key": ["account"], "fair_lanes": 0}, "fair_lanes", "must be an int >= 1, got 0"),
        (
            {"fair_key": ["account"], "fair_lanes": 1000},
            "fair_lanes",
            "must be an int from 1 to 256, got 1000",
        ),
        ({"fair_key": ["account"], "fair_lanes": "16"}, "fair_lanes", "got '16' (a str)"),
        (
            {"fair_key": ["account"], "fair_weights": {"acme": 0}},
            "fair_weights",
            "'acme' must be an int >= 1",
        ),
        ({"fair_key": ["account"], "fair_weights": {1: 2}}, "fair_weights", "the key 1 is not a str"),
        ({"fair_key": ["account"], "fair_weights": [("a", 2)]}, "fair_weights", "must be None, a dict"),
        ({"fair_key": ["account"], "fair_cap": 0}, "fair_cap", "must be None or an int >= 1"),
    ],
)
def test_a_bad_value_names_the_option_and_the_value(layer: dict[str, Any], option: str, problem: str) -> None:
    with pytest.raises(OptionError) as raised:
        validate(layer, TASK)
    assert raised.value.option == option and raised.value.source == TASK
    assert problem in str(raised.value)


def test_an_argument_the_body_does_not_have_is_refused_at_registration(app: Celery) -> None:
    with pytest.raises(OptionError, match=r"option 'fair_key' names unknown argument 'tenant'"):

        @app.task(base=SingletonTask, shared=False, name="proj.sync", fair_key=["tenant"])
        def sync(account: str) -> None: ...

        assert sync.name


@pytest.mark.parametrize(
    ("layer", "option", "problem"),
    [
        (
            {"fair_key": ["a"], "debounce": 2},
            "debounce",
            "cannot be used with fair_key (debounce re-publishes",
        ),
        ({"fair_key": ["a"], "keep_latest": True}, "keep_latest", "cannot be used with fair_key"),
    ],
)
def test_what_makes_no_sense_names_both_options(layer: dict[str, Any], option: str, problem: str) -> None:
    with pytest.raises(OptionError) as raised:
        validate(layer, TASK)
    assert raised.value.option == option
    assert problem in str(raised.value)


@pytest.mark.parametrize("option", ["fair_cap", "fair_weights"])
def test_a_cap_or_weights_without_a_tenant_is_refused_once_merged(option: str) -> None:
    value = 2 if option == "fair_cap" else {"a": 2}
    with pytest.raises(OptionError, match=rf"option '{option}' needs fair_key"):
        resolve(validate({option: value}, TASK), {}, {}, task_source=TASK, queue_source="q")


COMPOSES: list[dict[str, Any]] = [
    {"lock_key": ["account"]},
    {"max_concurrency": 3},
    {"throttle": 5},
    {"lock_on": "enqueue"},
    {"on_duplicate": "wait"},
    {"global_rate_limit": "10/s"},
    {"fair_cap": 2, "fair_weights": {"acme": 3}},
]


@pytest.mark.parametrize("options", COMPOSES)
def test_what_composes_with_fair_share(options: dict[str, Any]) -> None:
    layer = {"fair_key": ["account"], **options}
    resolved = resolve(validate(layer, TASK), {}, {}, task_source=TASK, queue_source="q")
    assert resolved.value("fair_key") == ("account",)


def test_valid_on_the_task_in_redislock_options_and_in_redislock_queues(app: Celery) -> None:
    app.conf.redislock_options = {"fair_lanes": 4}
    app.conf.redislock_queues = {"api": {"fair_key": ["account"], "fair_lanes": 8}}

    @app.task(base=SingletonTask, shared=False, name="proj.sync")
    def sync(account: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.own", fair_key=["account"])
    def own(account: str) -> None: ...

    runtime = runtime_for(app)
    assert runtime.plan(sync._get_current_object(), None).gates == (HOLDS,)  # every call may be held
    api = runtime.plan(sync._get_current_object(), "api")
    assert api.gates == (GATE, HOLDS) and api.options.value("fair_lanes") == 8
    assert runtime.plan(own._get_current_object(), None).options.value("fair_lanes") == 4
    # A worker consuming both queues consumes the lanes each says it has, once each.
    lanes = gate_queues(app, ["celery", "api"])
    assert lanes == [lane_name("celery", n) for n in range(4)] + [lane_name("api", n) for n in range(8)]


def test_a_tenant_is_named_by_its_arguments_values_or_the_callable(app: Celery) -> None:
    @app.task(base=SingletonTask, shared=False, name="proj.two", fair_key=["region", "account"])
    def two(account: str, region: str = "eu", n: int = 0) -> None: ...

    task = two._get_current_object()
    runtime = runtime_for(app)
    options = runtime.plan(task, None).options
    assert GATE._tenant(runtime, task, options, ("acme",), {"n": 3}) == "acme:eu"
    assert GATE._tenant(runtime, task, options, (42,), {"region": "us"}) == "42:us"

    @app.task(base=SingletonTask, shared=False, name="proj.fn", fair_key=lambda task, a, k: f"org-{a[0]}")
    def fn(org: int) -> None: ...

    task = fn._get_current_object()
    assert GATE._tenant(runtime, task, runtime.plan(task, None).options, (7,), {}) == "org-7"


def test_weights_from_a_dict_or_a_callable(app: Celery) -> None:
    @app.task(base=SingletonTask, shared=False, name="proj.w", fair_key=["a"], fair_weights={"big": 4})
    def weighted(a: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.c", fair_key=["a"], fair_weights=lambda t: len(t))
    def counted(a: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.bad", fair_key=["a"], fair_weights=lambda t: 0)
    def bad(a: str) -> None: ...

    runtime = runtime_for(app)
    for task, tenant, weight in ((weighted, "big", 4), (weighted, "small", 1), (counted, "abc", 3)):
        real = task._get_current_object()
        assert GATE._weight(real, runtime.plan(real, None).options, tenant) == weight
    real = bad._get_current_object()
    with pytest.raises(OptionError, match=r"fair_weights of task 'proj.bad' returned 0 for tenant 'x'"):
        GATE._weight(real, runtime.plan(real, None).options, "x")


def test_a_lane_answers_for_its_queue() -> None:
    assert base_queue(lane_name("reports", 3)) == "reports"
    assert base_queue("reports") == "reports" and base_queue("a.fair.x") == "a.fair.x"

    class Queue:
        def __init__(self, name: str) -> None:
            self.name, self.routing_key, self.exchange = name, name, None

    delivery = {"exchange": "", "routing_key": "reports.fair.3"}
    assert consumed_queue(delivery, [Queue("reports"), Queue("reports.fair.3")], {}) == "reports"
    assert consumed_queue({"consumer_tag": "t9"}, [], {"reports.fair.1": "t9"}) == "reports"


# Its task has a queue attribute on purpose (Celery deprecates it): what Celery then chooses.
@pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")
def test_the_queue_a_send_goes_to_is_celerys_choice(app: Celery) -> None:
    app.conf.task_routes = {"proj.routed": {"queue": "reports"}}

    @app.task(base=SingletonTask, shared=False, name="proj.routed", fair_key=["a"])
    def routed(a: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.own", fair_key=["a"], queue="bulk")
    def own(a: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.plain", fair_key=["a"])
    def plain(a: str) -> None: ...

    assert destination(routed, {}, ("x",), {}) == "reports"
    assert destination(own, {}, ("x",), {}) == "bulk"
    assert destination(plain, {}, ("x",), {}) == "celery"
    assert destination(plain, {"queue": "api"}, ("x",), {}) == "api"
    # A retry is sent by the exchange and routing key it came from: its lane's, so its queue.
    retry = {"exchange": "bulk.fair.3", "routing_key": "bulk.fair.3"}
    assert destination(plain, retry, ("x",), {}) == "bulk"
    assert destination(plain, {"queue": "bulk.fair.3"}, ("x",), {}) == "bulk"  # by the default exchange
    # All three given: the task's own exchange or routing key cannot send it past its lane.
    assert lane_route(plain, "bulk", 3) == {
        "queue": "bulk.fair.3",
        "exchange": "",
        "routing_key": "bulk.fair.3",
    }


# Its task has a queue attribute on purpose (Celery deprecates it): what Celery then chooses.
@pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")
def test_a_routed_send_gets_the_queue_layer_its_worker_resolves(app: Celery) -> None:
    # The queue layer given only through task_routes (or the task's queue): the send's plan is
    # the one the worker consuming that queue resolves, a lane's retry its queue's.
    app.conf.task_routes = {"proj.routed": {"queue": "reports"}}
    app.conf.redislock_queues = {"reports": {"fair_key": ["a"]}, "bulk": {"lock_on": "enqueue"}}

    @app.task(base=SingletonTask, shared=False, name="proj.routed")
    def routed_task(a: str) -> None: ...

    @app.task(base=SingletonTask, shared=False, name="proj.own", queue="bulk")
    def own_task(a: str) -> None: ...

    routed, own = routed_task._get_current_object(), own_task._get_current_object()

    assert send_plan(routed, {}, ("x",), {})[1].options.value("fair_key") == ("a",)
    assert send_plan(own, {}, ("x",), {})[1].options.lock_on == "enqueue"
    assert send_plan(routed, {"queue": "bulk"}, ("x",), {})[1].options.lock_on == "enqueue"
    retry = {"exchange": "reports.fair.3", "routing_key": "reports.fair.3"}
    assert send_plan(own, retry, ("x",), {})[1].options.value("fair_key") == ("a",)
    # A retry of a call consumed from a declared queue goes back by its exchange and routing key,
    # whatever the task's route: that queue's layer, as its worker resolves it.
    app.amqp.queues.select_add("bulk")
    back = {"exchange": app.amqp.queues["bulk"].exchange.name, "routing_key": "bulk"}
    assert send_plan(routed, back, ("x",), {})[1].options.lock_on == "enqueue"
    assert destination(routed, {"exchange": "unbound", "routing_key": "nowhere"}, (), {}) == "reports"
    worker_side = runtime_for(app).plan(routed, "reports")
    assert send_plan(routed, {}, ("x",), {})[1] is worker_side


def test_a_send_is_not_routed_when_no_queue_layer_exists(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every planned send's path: the router is asked only where a queue layer could apply.
    app.conf.redislock_options = {"fair_key": ["a"]}

    @app.task(base=SingletonTask, shared=False, name="proj.plain")
    def plain_task(a: str) -> None: ...

    plain = plain_task._get_current_object()

    asked: list[str] = []
    route = app.amqp.router.route
    monkeypatch.setattr(app.amqp.router, "route", lambda *call: asked.append(call[1]) or route(*call))
    assert send_plan(plain, {}, ("x",), {})[1].options.value("fair_key") == ("a",)
    assert asked == []
    app.conf.redislock_queues = {"reports": {"fair_lanes": 4}}
    reset_runtime(app)
    send_plan(plain, {}, ("x",), {})
    assert asked == ["proj.plain"]


def test_a_fair_send_asks_the_router_once(app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan's queue layer and the fair lane need the same routing: asked once, carried on.
    app.conf.redislock_queues = {"reports": {"fair_lanes": 4}}

    @app.task(base=SingletonTask, shared=False, name="proj.fair", fair_key=["a"])
    def fair_task(a: str) -> None: ...

    asked: list[str] = []
    route = app.amqp.router.route
    monkeypatch.setattr(app.amqp.router, "route", lambda *call: asked.append(call[1]) or route(*call))
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(Task, "apply_async", lambda self, *a, **options: published.append(options))
    fair_task.apply_async(("x",))  # the lock Redis is unreachable: a hashed lane, as documented
    assert asked == ["proj.fair"]
    assert published[0]["queue"].startswith("celery.fair.")


def test_lanes_not_declared_where_celery_makes_no_queue_are_named(app: Celery) -> None:
    app.conf.task_create_missing_queues = False

    @app.task(base=SingletonTask, shared=False, name="proj.sync", fair_key=["a"])
    def sync(a: str) -> None: ...

    with pytest.raises(
        OptionError, match=r"option 'fair_lanes' sends to lane 'celery.fair.2', which task_queues"
    ):
        lane_route(sync, "celery", 2)
