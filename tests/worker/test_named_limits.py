"""Named limits (``rate_limits``), a cost per call, a limit changed at run time and a pause raised
by a body, on real prefork workers and a real redis-server. Every limit is checked by what it
promises, on the server's clock: the starts the limiter's log records (``GrantRecorder``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import reset_limit, set_limit, show_limits
from celery_redislock.config.arguments import KeyBuilder
from celery_redislock.contrib.testing import poll
from celery_redislock.engine.rate_decisions import Limit, decide_limits
from celery_redislock.engine.rates import Rate
from celery_redislock.engine.timing import server_time
from celery_redislock.gates.rate_calls import mixed_rate_key, named_log, overrides_of
from celery_redislock.integration.runtime import run_function, runtime_for
from celery_redislock.ops.inventory import mode_keys
from celery_redislock.ops.limit_cli import limit as limit_command
from celery_redislock.ops.listing import lock_pattern
from tests.harness import GrantRecorder, most_in_a_window

from .conftest import stats_of
from .mode_harness import Deployment, ModeTask, Store, node

BODY = """
coord.rpush("ran:" + tag, f"{n} {self.request.id}")
return n
"""


def named_task(name: str, limits: Any, **options: Any) -> ModeTask:
    return ModeTask(name, "tag, n", BODY, {"rate_limits": limits, "acks_late": True, **options})


def settings(limits: dict[str, Any]) -> str:
    """The worker module's lines declaring ``limits``."""
    return f"\napp.conf.redislock_limits = {limits!r}\n"


class Written:
    """A callable option as a worker module writes it (its repr is its source)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.function = eval(source)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)

    def __repr__(self) -> str:
        return self.source


#: The pools and stores the cost, runtime-change and pause tests run on: the share test's, the
#: first one in every run, the others marked slow (they repeat a promise on another pool).
TOPOLOGIES = [
    pytest.param("prefork", "single", id="prefork"),
    pytest.param("threads", "single", id="threads", marks=pytest.mark.slow),
    pytest.param("solo", "single", id="solo", marks=pytest.mark.slow),
    pytest.param("gevent", "single", id="gevent", marks=pytest.mark.slow),
    pytest.param("threads", "cluster", id="threads-cluster", marks=pytest.mark.slow),
]


def log_of(app: Celery, name: str) -> str:
    return named_log(runtime_for(app).settings.key_prefix, name)


def ran(coord: redis.Redis, tag: str) -> list[int]:
    return sorted(int(entry.split()[0]) for entry in coord.lrange(f"ran:{tag}", 0, -1))


def drain(
    client: Any, app: Celery, task: ModeTask, limit: str, tag: str, count: int, timeout: float = 60
) -> list[float]:
    """Send ``count`` calls ``task(tag, n)`` on ``app`` and wait for each one's result; the starts
    the log of ``limit`` (on ``client``'s Redis) recorded meanwhile, server seconds, sorted."""
    record = GrantRecorder(client, log_of(app, limit))
    send = task.sender(app)
    results = [send.delay(tag, n) for n in range(count)]
    assert sorted(result.get(timeout=timeout) for result in results) == list(range(count))
    return record.stop()


@pytest.mark.slow
def test_five_a_second_and_twenty_a_minute_on_one_task_holds_both(
    coord: redis.Redis, locks: redis.Redis, deployment: Deployment
) -> None:
    # A minute long (the 21st call waits for the first to leave the minute window): first in the
    # file, so that under xdist it starts early rather than ending the run.
    # Seen red with only a limit's first rate given to the decision: 25 starts in five seconds.
    task = named_task("named.both", ["reports"])
    module = settings({"reports": ["5/s", "20/m"]})
    deployment.start(task, "-c", "2", "-n", node("both"), module=module)
    grants = drain(locks, deployment.app(), task, "reports", "both", 25, timeout=150)
    assert len(grants) == 25
    assert most_in_a_window(grants, 1.0) <= 5
    assert most_in_a_window(grants, 60.0) <= 20  # so the 21st started after the first's minute
    assert ran(coord, "both") == list(range(25))


@pytest.mark.parametrize(
    ("pool", "kind"),
    [
        ("prefork", "single"),
        ("threads", "single"),
        ("solo", "single"),
        ("gevent", "single"),
        ("threads", "cluster"),
    ],
)
def test_two_tasks_sharing_a_limit_never_pass_it_together(
    pool: str, kind: str, store: Store, coord: redis.Redis
) -> None:
    # Seen red with a partition per task (the task name in its log): the shared log got none of the 40.
    first, second = named_task("named.first", ["partner"]), named_task("named.second", ["partner"])
    module = second.source() + settings({"partner": "10/s"})
    store.deployment.start(first, "-c", "2", "-n", node(f"named-{pool}"), pool=pool, module=module)
    app = store.deployment.app(redislock_limits={"partner": "10/s"})
    record = GrantRecorder(store.client, log_of(app, "partner"))
    senders = [first.sender(app), second.sender(app)]
    results = [senders[n % 2].delay("share", n) for n in range(40)]
    assert sorted(result.get(timeout=60) for result in results) == list(range(40))
    grants = record.stop()
    assert len(grants) == 40
    assert most_in_a_window(grants, 1.0) <= 10
    assert ran(coord, "share") == list(range(40))


@pytest.mark.parametrize(("pool", "kind"), TOPOLOGIES)
def test_a_call_costing_3_of_30_a_second_starts_at_most_10_a_second(
    pool: str, kind: str, store: Store
) -> None:
    # Seen red with the cost not given to the decision (each call one unit): 30 in one second.
    task = named_task("named.weighted", ["tokens"], rate_cost=3)
    module = settings({"tokens": "30/s"})
    store.deployment.start(task, "-c", "2", "-n", node("cost"), pool=pool, module=module)
    # One entry a call: its first unit's (the others are g1:, g2:).
    grants = drain(store.client, store.deployment.app(), task, "tokens", "cost", 30)
    assert len(grants) == 30
    assert most_in_a_window(grants, 1.0) <= 10


def test_a_call_costing_more_than_its_limit_fails_naming_it(deployment: Deployment) -> None:
    task = named_task("named.costly", ["small"], rate_cost=Written("lambda task, args, kwargs: args[1]"))
    proc = deployment.start(task, "-c", "1", "-n", node("costly"), module=settings({"small": "5/s"}))
    send = task.sender(deployment.app())
    fits, too_big = send.delay("costly", 5), send.delay("costly", 6)
    assert fits.get(timeout=30) == 5
    error = too_big.get(timeout=30, propagate=False)
    assert "option 'cost' is 6, more than limit 'small' (5/s) admits at once" in str(error)
    assert poll(lambda: "more than limit 'small'" in proc.log(), 15)  # logged as the task's failure


@pytest.mark.parametrize(("pool", "kind"), TOPOLOGIES)
def test_a_limit_lowered_at_run_time_is_obeyed_by_two_workers(
    pool: str, kind: str, store: Store, coord: redis.Redis
) -> None:
    # Seen red with the runtime rates not read by the decision: 18 in a second after the change.
    task = named_task("named.lowered", ["api"])
    module = settings({"api": "20/s"})
    for _ in range(2):
        store.deployment.start(task, "-c", "1", "-n", node("lowered"), pool=pool, module=module)
    app = store.deployment.app(redislock_limits={"api": "20/s"})
    locks = store.client
    record = GrantRecorder(locks, log_of(app, "api"))
    send = task.sender(app)
    results = [send.delay("lowered", n) for n in range(40)]
    assert poll(lambda: len(ran(coord, "lowered")) >= 10, 30)
    assert set_limit(app, "api", "5/s")[0].limit == 5
    changed = server_time(locks)  # on a cluster, the clock of the node the limits live on
    assert sorted(result.get(timeout=90) for result in results) == list(range(40))
    grants = record.stop()
    after = [at for at in grants if at >= changed + 1.0]
    assert after, "the drain ended within a second of the change"
    assert most_in_a_window(after, 1.0) <= 5
    (info,) = [each for each in show_limits(app) if each.name == "api"]
    assert info.overridden and str(info.rates[0]) == "5/s" and info.source == "redislock_limits"
    assert reset_limit(app, "api") is True
    assert not next(each for each in show_limits(app) if each.name == "api").overridden


def test_the_limit_commands_show_set_and_reset(make_app: Callable[..., Celery], locks: redis.Redis) -> None:
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    app = make_app(redislock_limits={"partner": "10/s", "llm": ["5/s", "20/m"]})
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(
            limit_command, list(args), obj=CLIContext(app=app, no_color=True, workdir=".", quiet=False)
        )

    assert run("set", "partner", "20/m").output == "Limit partner is 20/m (runtime override) until reset\n"
    shown = run("show").output
    assert "partner  20/m  [runtime override (declared 10/s in redislock_limits)]" in shown
    assert "llm  5/s, 20/m  [redislock_limits]" in shown
    refused = run("set", "partnr", "5/s")
    assert refused.exit_code != 0 and "did you mean 'partner'?" in refused.output
    assert run("reset", "partner").output == "Limit partner is back to its declared rates (10/s)\n"
    assert run("pause", "llm", "30").output == "Paused limit llm for 30s\n"
    # One show, read once: the seconds left tick between two (seen red: 30.000s, then 29.999s).
    assert re.search(r"paused for (29\.\d{3}|30\.000)s", run("show").output)


def test_limit_show_shows_a_burst_limit_as_a_bucket(make_app: Callable[..., Celery]) -> None:
    # Seen red when every limit was shown as a window: "3 started in the window".
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    app = make_app(redislock_limits={"api": "1/m burst 5", "plain": "5/m", "both": ["5/m", "1/m burst 5"]})
    runtime = runtime_for(app)
    prefix = runtime.settings.key_prefix
    for name, rates in (
        ("api", (Rate(1, 60, 5),)),
        ("plain", (Rate(5, 60),)),
        ("both", (Rate(5, 60), Rate(1, 60, 5))),
    ):
        limit = Limit(named_log(prefix, name), rates, name, overrides_of(prefix))
        for caller in ("a", "b", "c"):
            assert decide_limits(runtime.scripts, (limit,), caller, reserve=False)
    context = CLIContext(app=app, no_color=True, workdir=".", quiet=False)
    shown = CliRunner().invoke(limit_command, ["show"], obj=context).output
    assert f"  {named_log(prefix, 'api')}: bucket of 5: 2 free (full again in 1" in shown
    assert ", 0 reserved, next free slot now" in shown
    assert f"  {named_log(prefix, 'plain')}: 3 started in the window, 0 reserved, next free slot now" in shown
    listed = json.loads(CliRunner().invoke(limit_command, ["show", "--json"], obj=context).output)
    (bucket,) = next(each for each in listed if each["name"] == "api")["partitions"]
    assert (bucket["kind"], bucket["burst"], bucket["tokens"]) == ("bucket", 5, 2)
    assert 179.0 < bucket["full_in"] <= 180.0
    (window,) = next(each for each in listed if each["name"] == "plain")["partitions"]
    assert (window["kind"], window["started"]) == ("window", 3)
    # A limit of several rates: its partition by each of them (seen red with its first rate only).
    assert f"  {named_log(prefix, 'both')}:\n    5/m: 3 started in the window, 0 reserved" in shown
    assert "\n    1/m burst 5: bucket of 5: 2 free (full again in 1" in shown
    (both,) = next(each for each in listed if each["name"] == "both")["partitions"]
    assert [(each["rate"], each["kind"]) for each in both["rates"]] == [
        ("5/m", "window"),
        ("1/m burst 5", "bucket"),
    ]
    assert (both["kind"], both["started"], both["rates"][1]["tokens"]) == ("window", 3, 2)


#: The two ways a body pauses its limits.
PAUSES = {
    "raise": "raise RateLimitPaused(retry_after=2)",
    "method": "self.request.redislock.pause(retry_after=2)",
}


@pytest.mark.parametrize(
    ("pool", "kind", "how"),
    [
        pytest.param("prefork", "single", "raise", id="prefork-raise"),
        pytest.param("prefork", "single", "method", id="prefork-method"),
        pytest.param("threads", "single", "method", id="threads-method", marks=pytest.mark.slow),
        pytest.param("solo", "single", "raise", id="solo-raise", marks=pytest.mark.slow),
        pytest.param("gevent", "single", "method", id="gevent-method", marks=pytest.mark.slow),
        pytest.param("threads", "cluster", "raise", id="threads-cluster-raise", marks=pytest.mark.slow),
    ],
)
def test_a_429_pause_stops_every_worker_for_its_duration_and_loses_nothing(
    pool: str,
    kind: str,
    how: str,
    store: Store,
    coord: redis.Redis,
) -> None:
    # Seen red with the pause not written (no pause seen in Redis), with the paused call not
    # re-queued (its caller got RateLimitPaused: one call lost), and, for the method, without
    # RedisLockInfo.pause (its caller got the AttributeError).
    body = f"""
    if n == 5 and coord.incr("429") == 1:  # the partner's one 429, on the first run of call 5
        {PAUSES[how]}
    coord.rpush("ran:" + tag, f"{{n}} {{self.request.id}}")
    return n
    """
    task = ModeTask("named.paused", "tag, n", body, {"rate_limits": ["partner"], "acks_late": True})
    module = "from celery_redislock import RateLimitPaused\n" + settings({"partner": "50/s"})
    names = [node("paused-a"), node("paused-b")]
    for name in names:
        store.deployment.start(task, "-c", "1", "-n", name, pool=pool, module=module)
    app = store.deployment.app()
    log = log_of(app, "partner")
    locks = store.client
    record = GrantRecorder(locks, log)
    send = task.sender(app)
    results = [send.delay("paused", n) for n in range(30)]
    ends: list[int] = []

    def paused() -> bool:  # read often: the pause lasts 2 s
        ends.append(int(locks.get(log + ":pause") or 0))
        return ends[-1] > 0

    assert poll(paused, 30, 0.01)
    assert sorted(result.get(timeout=60) for result in results) == list(range(30))
    grants = record.stop()
    end = ends[-1] / 1000
    assert [at for at in grants if end - 2.0 < at < end] == []
    assert ran(coord, "paused") == list(range(30))  # call 5 ran once, after the pause
    assert (
        sum((stats_of(app, name) or {"counters": {}})["counters"].get("rate_paused", 0) for name in names)
        == 1
    )


@pytest.mark.parametrize(("pool", "kind"), TOPOLOGIES)
def test_a_burst_goes_through_then_the_steady_rate(pool: str, kind: str, store: Store) -> None:
    # Seen red with the burst read as a window of 10 a second: 40 of the 50 postponed.
    task = named_task("named.burst", ["api"])
    module = settings({"api": "10/s burst 30"})
    proc = store.deployment.start(task, "-c", "2", "-n", node("burst"), pool=pool, module=module)
    grants = drain(store.client, store.deployment.app(), task, "api", "burst", 50)
    for window in (0.5, 1.0, 2.0):  # the bucket's envelope: B + N * w in any w seconds
        assert most_in_a_window(grants, window) <= 30 + 10 * window
    # The first 30 found the bucket full: at most the other 20 waited for their slot.
    assert proc.log().count("Rate-limited named.burst[") <= 20


@pytest.mark.parametrize(
    ("pool", "kind"),
    [pytest.param("prefork", "single", id="prefork"), pytest.param("threads", "cluster", id="cluster")],
)
def test_a_task_mixes_its_own_global_rate_limit_with_a_named_limit(
    pool: str,
    kind: str,
    store: Store,
    coord: redis.Redis,
) -> None:
    # Seen red on a Cluster with the task's own partition under its own hash tag: every call
    # failed with an OptionError (its limits in different slots).
    task = named_task("named.mixed", ["partner"], global_rate_limit="5/s")
    module = settings({"partner": "10/s"})
    store.deployment.start(task, "-c", "2", "-n", node("mixed"), pool=pool, module=module)
    app = store.deployment.app(redislock_limits={"partner": "10/s"})
    runtime = runtime_for(app)
    prefix = runtime.settings.key_prefix
    send = task.sender(app)
    real = app.tasks[send.name]
    partition = KeyBuilder(prefix, real.name, run_function(type(real)), (), option="rate_limit_key")
    own = mixed_rate_key(prefix, partition.key(("mixed", 0), {}, real))  # one partition: any call's
    mine, shared = GrantRecorder(store.client, own), GrantRecorder(store.client, log_of(app, "partner"))
    results = [send.delay("mixed", n) for n in range(15)]
    assert sorted(result.get(timeout=60) for result in results) == list(range(15))
    starts, partner = mine.stop(), shared.stop()
    assert len(starts) == len(partner) == 15
    assert most_in_a_window(starts, 1.0) <= 5  # its own limit, the tighter one, held
    assert ran(coord, "mixed") == list(range(15))
    # 'redislock list' finds the task's partition under the named limits' tag, by its own rate.
    rows = {key: text for key, _, text, _ in mode_keys(runtime, lock_pattern(prefix, None), None)}
    assert rows[own].startswith("rate limit 5/s: ")
