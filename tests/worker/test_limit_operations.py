"""Named limits under an operator's runtime changes (``celery redislock limit set|reset|pause|
resume``), on real prefork workers and a real redis-server: a rate set below a call's cost, a
reset after a slow override, a pause shortened or lifted, and bad input refused. Each change
gives up the slots reserved; a waiting call is decided anew when it comes back, never failed and
never run twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner

from celery_redislock import show_limits
from celery_redislock.contrib.testing import WorkerProcess, poll
from celery_redislock.gates.rate_calls import named_log
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.limit_cli import limit as limit_command
from tests.harness import GrantRecorder, most_in_a_window

from .mode_harness import Deployment, ModeTask, node

BODY = """
coord.rpush("ran:" + tag, f"{n} {self.request.id}")
return n
"""

#: A waiting call hops back every 2 s (``redislock_max_postpone``), so it is decided again soon
#: after a change, whatever slot it was re-queued for.
HOPS = "\napp.conf.redislock_max_postpone = 2\n"


def named_task(name: str, limits: Any, **options: Any) -> ModeTask:
    return ModeTask(name, "tag, n", BODY, {"rate_limits": limits, "acks_late": True, **options})


def start(deployment: Deployment, task: ModeTask, limits: dict[str, Any], name: str) -> WorkerProcess:
    module = f"\napp.conf.redislock_limits = {limits!r}\n" + HOPS
    return deployment.start(task, "-c", "2", "-n", node(name), module=module)


def cli(app: Celery) -> Callable[..., Any]:
    """``run("pause", "partner", "30")``: the ``limit`` command's result on ``app``."""
    runner = CliRunner()
    context = CLIContext(app=app, no_color=True, workdir=".", quiet=False)
    return lambda *args: runner.invoke(limit_command, list(args), obj=context)


def reserved(app: Celery, name: str) -> int:
    """The calls waiting with a slot in the named limit's partitions."""
    (info,) = [each for each in show_limits(app) if each.name == name]
    return sum(partition.state.reserved for partition in info.partitions)


def paused(app: Celery, name: str) -> float:
    (info,) = [each for each in show_limits(app) if each.name == name]
    return max((partition.state.paused for partition in info.partitions), default=0.0)


def ran(coord: redis.Redis, tag: str) -> list[int]:
    return sorted(int(entry.split()[0]) for entry in coord.lrange(f"ran:{tag}", 0, -1))


def results_of(results: list[Any], timeout: float = 60) -> list[int]:
    return sorted(result.get(timeout=timeout) for result in results)


def test_a_limit_set_below_a_calls_cost_delays_the_calls_waiting_and_fails_none(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    # Seen red before an override could delay a call: the calls waiting behind the pause ended
    # FAILURE at their next hop ("option 'cost' is 5, more than limit 'tokens' (2/s) admits at once").
    limits = {"tokens": "10/s"}
    task = named_task("ops.tokens", ["tokens"], rate_cost=5)
    proc = start(deployment, task, limits, "tokens")
    app = deployment.app(redislock_limits=limits)
    run = cli(app)
    assert run("pause", "tokens", "600").exit_code == 0  # the calls wait, with slots, behind it
    send = task.sender(app)
    results = [send.delay("tokens", n) for n in range(10)]
    assert poll(lambda: reserved(app, "tokens") == 10, 30)

    changed = run("set", "tokens", "2/s")

    def told_to_wait() -> set[str]:  # the calls decided under the override at least once
        lines = [line for line in proc.log().splitlines() if "the runtime rate of limit 'tokens'" in line]
        return {result.id for result in results if any(result.id in line for line in lines)}

    told = poll(lambda: len(told_to_wait()) == 10, 60)
    assert told, f"{len(told_to_wait())} of 10 told; {[r.state for r in results]}:\n{proc.log()[-4000:]}"
    assert [result.state for result in results] == ["PENDING"] * 10  # none failed, none ran
    assert changed.output.startswith("Limit tokens is 2/s (runtime override) until reset; it stays paused")
    assert "A call costing more than 2 unit(s) of tokens waits, and is not failed" in changed.output

    assert run("reset", "tokens").exit_code == 0
    assert run("resume", "tokens").output.startswith("Limit tokens is no longer paused")
    record = GrantRecorder(locks, named_log(runtime_for(app).settings.key_prefix, "tokens"))
    assert results_of(results) == list(range(10))
    assert most_in_a_window(record.stop(), 1.0) <= 2  # 10 units a second, 5 a call
    assert ran(coord, "tokens") == list(range(10))  # each ran once


def test_a_reset_gives_new_calls_the_declared_rate_at_once(
    deployment: Deployment, coord: redis.Redis, locks: redis.Redis
) -> None:
    # Seen red with the reservations kept across the change: 14 still reserved after the reset,
    # the 1/m slots of the override, and every new call placed after them.
    limits = {"partner": "10/s"}
    task = named_task("ops.partner", ["partner"])
    start(deployment, task, limits, "partner")
    app = deployment.app(redislock_limits=limits)
    run = cli(app)
    assert run("set", "partner", "1/m").exit_code == 0
    send = task.sender(app)
    first = [send.delay("reset", n) for n in range(15)]
    assert poll(lambda: reserved(app, "partner") == 14, 30)  # one started, 14 a minute apart

    reset = run("reset", "partner").output
    assert reserved(app, "partner") == 0
    assert reset == "Limit partner is back to its declared rates (10/s)\n"
    record = GrantRecorder(locks, named_log(runtime_for(app).settings.key_prefix, "partner"))
    later = [send.delay("reset", n) for n in range(15, 20)]
    # Ready long before the override's slots: the new calls, and the old at their next hop.
    assert results_of(later + first, timeout=30) == list(range(20))
    assert most_in_a_window(record.stop(), 1.0) <= 10
    assert ran(coord, "reset") == list(range(20))  # each ran once


def test_a_pause_is_shortened_or_lifted_and_the_calls_waiting_run(
    deployment: Deployment, coord: redis.Redis
) -> None:
    # Seen red with a pause that only lengthened: "Paused limit partner for 1s" while the hour's
    # pause stayed, and the calls waited for it.
    limits = {"partner": "10/s"}
    task = named_task("ops.paused", ["partner"])
    start(deployment, task, limits, "paused")
    app = deployment.app(redislock_limits=limits)
    run = cli(app)
    send = task.sender(app)

    assert run("pause", "partner", "3600").output == "Paused limit partner for 3600s\n"
    first = [send.delay("paused", n) for n in range(5)]
    assert poll(lambda: reserved(app, "partner") == 5, 30)
    shortened = run("pause", "partner", "1").output
    assert results_of(first, timeout=30) == list(range(5))
    assert shortened.startswith("Paused limit partner for 1s (replacing a pause with 35"), shortened

    assert run("pause", "partner", "3600").exit_code == 0
    second = [send.delay("paused", n) for n in range(5, 10)]
    assert poll(lambda: reserved(app, "partner") == 5, 30)
    assert run("resume", "partner").output.startswith("Limit partner is no longer paused (it had 35")
    assert paused(app, "partner") == 0
    assert results_of(second, timeout=30) == list(range(5, 10))
    assert ran(coord, "paused") == list(range(10))
    assert run("resume", "partner").output == "Limit partner was not paused\n"


def test_the_limit_commands_refuse_bad_input_and_change_nothing(make_app: Callable[..., Celery]) -> None:
    # Seen red with a pause of 1e300 s reaching Redis (a raw ResponseError) and a rate of 10^20 a
    # second accepted.
    app = make_app(redislock_limits={"tokens": "10/s"})
    run = cli(app)
    assert run("pause", "tokens", "30").exit_code == 0
    for seconds, problem in (
        ("1e300", "option 'seconds' must be at most 2592000 (30 days) for a pause, got 1e+300"),
        ("0", "option 'seconds' must be a number of seconds > 0, got 0.0"),
        ("nan", "option 'seconds' must be a number of seconds > 0, got nan"),
    ):
        refused = run("pause", "tokens", seconds)
        assert refused.exit_code != 0 and problem in refused.output, refused.output
        assert "pause_limit('tokens')" in refused.output
    assert 29 < paused(app, "tokens") <= 30  # the pause in force is the one set before

    refused = run("set", "tokens", "99999999999999999999/s")
    assert refused.exit_code != 0
    assert "got '99999999999999999999/s' (N is more than 1000000000)" in refused.output
    assert not next(each for each in show_limits(app) if each.name == "tokens").overridden

    reset = run("reset", "tokens").output
    assert reset.startswith("Limit tokens had no runtime override (10/s); it stays paused for 29."), reset
    assert reset.endswith("(`limit resume tokens` lifts the pause)\n")
    assert run("resume", "tokens").output.startswith("Limit tokens is no longer paused (it had 29.")
    assert paused(app, "tokens") == 0
