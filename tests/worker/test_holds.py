"""An operator's holds (``celery redislock hold set|lift|show``) on real prefork workers and a real
redis-server: a held task's calls wait and run once lifted, a held key value holds only its own
calls, a timed hold ends by itself, and bad input is refused with nothing changed. A held call
is re-queued, never dropped, and runs once, its worker killed while it waits too. A worker
process reads the holds off the calls' path, primed as it starts: its first call obeys a hold
set before, and makes no round trip for it."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.engine.keys import holds_key
from celery_redislock.engine.lock_engine import LockEngine
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.hold_cli import hold as hold_command
from celery_redislock.ops.holds import hold_calls, lift_calls, show_holds
from celery_redislock.ops.web import create_app
from tests.harness import counting_client

from .conftest import restore_visible
from .mode_harness import Deployment, ModeTask, node
from .test_put_off_copies import KILL  # SIGKILL itself at a copy's publish or confirm (kill_at)
from .test_web import csrf_of

BODY = """
coord.rpush("ran:" + tenant, f"{n} {self.request.id}")
return n
"""

#: A held call looks again every second (``redislock_max_postpone`` bounds each wait), so a
#: lift reaches it soon.
LOOKS = "\napp.conf.redislock_max_postpone = 1\n"


@pytest.fixture(autouse=True)
def no_holds_left(locks: redis.Redis) -> Iterator[None]:
    """The lock database is the session's: a hold left behind would hold another test's calls."""
    yield
    locks.delete(holds_key("redislock"))


def held_task(name: str) -> ModeTask:
    return ModeTask(name, "tenant, n", BODY, {"acks_late": True})


def cli(app: Celery) -> Callable[..., Any]:
    """``run("set", "proj.task", "--for", "3")``: the ``hold`` command's result on ``app``."""
    runner = CliRunner()
    context = CLIContext(app=app, no_color=True, workdir=".", quiet=False)
    return lambda *args: runner.invoke(hold_command, list(args), obj=context)


def start(deployment: Deployment, task: ModeTask, name: str) -> tuple[WorkerProcess, Celery, Any]:
    """A worker of ``task``, an app that declares it, and the task as that app sends it."""
    proc = deployment.start(task, "-c", "2", "-n", node(name), module=LOOKS)
    app = deployment.app()
    return proc, app, task.sender(app)


#: The line each worker process logs as the holds it reads change (``gates.hold_watch``).
SEEN = re.compile(r"Holds seen by process (\d+): (.*)$")


def all_see(proc: WorkerProcess, holds: str, processes: int = 2) -> bool:
    """Whether each of the worker's ``processes`` pool processes reads, last, holds that start
    with ``holds`` (a hold's "for N s more" changes from one read to the next)."""
    last: dict[str, str] = {}
    for line in proc.log().splitlines():
        found = SEEN.search(line)
        if found:
            last[found.group(1)] = found.group(2)
    return sum(seen.startswith(holds) for seen in last.values()) == processes


def obeyed(proc: WorkerProcess, holds: str) -> None:
    """Until every pool process of ``proc`` has read ``holds`` (within ``REFRESH`` of the set)."""
    assert poll(lambda: all_see(proc, holds), 30), proc.log()


def held(proc: WorkerProcess, results: list[Any]) -> set[str]:
    """The ids of ``results`` the worker has put off for a hold at least once."""
    lines = [line for line in proc.log().splitlines() if "Held " in line]
    return {result.id for result in results if any(result.id in line for line in lines)}


def ran(coord: redis.Redis, tenant: str) -> list[int]:
    return sorted(int(entry.split()[0]) for entry in coord.lrange(f"ran:{tenant}", 0, -1))


def results_of(results: list[Any], timeout: float = 60) -> list[int]:
    return sorted(result.get(timeout=timeout) for result in results)


def test_a_held_tasks_calls_wait_and_run_once_lifted(deployment: Deployment, coord: redis.Redis) -> None:
    task = held_task("holds.whole")
    app = deployment.app()
    send = task.sender(app)
    run = cli(app)
    done = run("set", "holds.whole")
    assert done.output == "Held holds.whole until lifted; every worker obeys it within 1s\n", done.output
    # Set before the worker starts: each pool process read it as it started, so its first calls
    # are held, with no wait for a refresh.
    proc = deployment.start(task, "-c", "2", "-n", node("whole"), module=LOOKS)
    obeyed(proc, "holds.whole until lifted")  # no call sent yet: read as each process started

    results = [send.delay("whole", n) for n in range(6)]
    assert poll(lambda: held(proc, results) == {result.id for result in results}, 30), proc.log()
    assert [result.state for result in results] == ["PENDING"] * 6  # waiting, not failed
    assert ran(coord, "whole") == []
    shown = run("show").output
    assert shown == "holds.whole  until lifted\n", shown

    lifted = run("lift", "holds.whole").output
    assert lifted.startswith("Lifted the hold of holds.whole (it was until lifted)"), lifted
    assert results_of(results) == list(range(6))
    assert ran(coord, "whole") == list(range(6))  # each ran once
    assert run("show").output == "No holds in force\n"
    assert run("lift", "holds.whole").output == "holds.whole was not held\n"


def test_a_held_key_value_holds_only_its_own_calls(deployment: Deployment, coord: redis.Redis) -> None:
    task = held_task("holds.tenants")
    proc, app, send = start(deployment, task, "tenants")
    run = cli(app)
    assert run("set", "holds.tenants", "--key", "tenant=acme").exit_code == 0
    obeyed(proc, "holds.tenants tenant=acme until lifted")

    acme = [send.delay("acme", n) for n in range(4)]
    others = [send.delay("globex", n) for n in range(4)] + [send.delay(tenant="initech", n=9)]
    assert results_of(others) == [0, 1, 2, 3, 9]  # not held: run at once
    assert poll(lambda: held(proc, acme) == {result.id for result in acme}, 30), proc.log()
    assert held(proc, others) == set()
    assert [result.state for result in acme] == ["PENDING"] * 4
    assert ran(coord, "acme") == []
    assert (
        run("show", "--json")
        .output.replace(" ", "")
        .replace("\n", "")
        .startswith('[{"task":"holds.tenants","key":{"tenant":"acme"},"left":null}]')
    )

    # The key as it was set: lifting the whole task's hold lifts nothing.
    assert run("lift", "holds.tenants").output == "holds.tenants was not held\n"
    assert run("lift", "holds.tenants", "--key", "tenant=acme").exit_code == 0
    assert results_of(acme) == list(range(4))
    assert ran(coord, "acme") == list(range(4))
    assert ran(coord, "globex") == list(range(4))


def test_a_timed_hold_ends_by_itself(deployment: Deployment, coord: redis.Redis) -> None:
    task = held_task("holds.timed")
    proc, app, send = start(deployment, task, "timed")
    run = cli(app)
    done = run("set", "holds.timed", "--for", "8")
    assert done.output.startswith("Held holds.timed for 8s;"), done.output
    assert run("show").output.startswith("holds.timed  for ")
    obeyed(proc, "holds.timed for ")

    results = [send.delay("timed", n) for n in range(4)]
    assert poll(lambda: held(proc, results) == {result.id for result in results}, 30), proc.log()
    assert results_of(results) == list(range(4))  # no lift: the hold ended
    assert ran(coord, "timed") == list(range(4))
    assert run("show").output == "No holds in force\n"


def test_bad_input_is_refused_and_changes_nothing(make_app: Callable[..., Celery]) -> None:
    app = make_app()
    held_task("holds.refused").sender(app)

    @app.task(name="holds.plain", shared=False)
    def plain(tenant: str) -> None:
        raise AssertionError("never called")

    run = cli(app)
    assert run("set", "holds.refused", "--key", "tenant=acme", "--for", "600").exit_code == 0
    for args, problem in (
        (["holds.nothing"], "names task 'holds.nothing', which the app has not registered"),
        (["holds.plain"], "names task 'holds.plain', which is not a SingletonTask"),
        (["holds.refused", "--for", "0"], "option 'seconds' must be a number of seconds > 0, got 0.0"),
        (["holds.refused", "--for", "-5"], "option 'seconds' must be a number of seconds > 0, got -5.0"),
        (["holds.refused", "--for", "nan"], "option 'seconds' must be a number of seconds > 0, got nan"),
        (["holds.refused", "--for", "1e9"], "option 'seconds' must be at most 2592000 (30 days)"),
        (
            ["holds.refused", "--key", "region=eu"],
            "names argument 'region', which task 'holds.refused' has not: its arguments are tenant, n",
        ),
        (["holds.refused", "--key", "tenant"], "option 'key' must be NAME=VALUE"),
        (["holds.refused", "--key", "n=1", "--key", "n=2"], "option 'key' names argument 'n' twice"),
    ):
        refused = run("set", *args)
        assert refused.exit_code != 0 and problem in refused.output, (args, refused.output)
        assert "hold_calls(" in refused.output
    after = run("show").output  # the one hold set before, as it was
    assert after.startswith("holds.refused tenant=acme  for ") and after.count("\n") == 1, after
    assert run("lift", "holds.refused", "--key", "tenant").exit_code != 0
    assert len(run("show", "--json").output.split('"task"')) == 2  # still the one hold


def test_the_page_holds_and_lifts_with_allow_holds_only(deployment: Deployment, coord: redis.Redis) -> None:
    task = held_task("holds.page")
    proc, app, send = start(deployment, task, "page")
    secret = b"one secret for both pages"
    read_only = create_app(app, poll_interval=3600, secret_key=secret).test_client()
    page = create_app(app, allow_holds=True, poll_interval=3600, secret_key=secret).test_client()
    token = csrf_of(page.get("/").get_data(as_text=True))
    cookie = page.get_cookie("redislock_web")
    assert cookie is not None
    read_only.set_cookie(
        "redislock_web", cookie.value
    )  # its session's token: refused for want of --allow-holds
    form = {"task": "holds.page", "key": "tenant=acme", "csrf_token": token}
    refused = read_only.post("/hold", data=form)
    assert refused.status_code == 403 and "--allow-holds" in refused.get_data(as_text=True)
    assert page.post("/hold", data={**form, "csrf_token": "forged"}).status_code == 403
    refused = page.post("/hold", data={**form, "key": "region=eu"}, follow_redirects=True)
    assert (
        "Not held: hold_calls(&#39;holds.page&#39;): option &#39;key&#39; names argument"
        in refused.get_data(as_text=True)
    )
    assert show_holds(app) == []  # nothing changed

    shown = page.post("/hold", data=form, follow_redirects=True).get_data(as_text=True)
    assert "Held holds.page tenant=acme until lifted" in shown
    assert "<td>holds.page</td><td><code>tenant=acme</code></td>" in shown
    obeyed(proc, "holds.page tenant=acme until lifted")
    acme, other = send.delay("acme", 1), send.delay("globex", 2)
    assert other.get(timeout=30) == 2
    assert poll(lambda: held(proc, [acme]) == {acme.id}, 30), proc.log()
    assert acme.state == "PENDING"

    lift = {"task": "holds.page", "key": ["tenant=acme"], "csrf_token": token}
    assert "--allow-holds" in read_only.post("/lift", data=lift).get_data(as_text=True)
    lifted = page.post("/lift", data=lift, follow_redirects=True).get_data(as_text=True)
    assert "Lifted the hold of holds.page tenant=acme" in lifted and 'id="no-holds"' in lifted
    assert acme.get(timeout=30) == 1
    assert ran(coord, "acme") == [1]


@pytest.mark.parametrize("kill_at", ["published", "confirmed"])
def test_held_calls_whose_worker_is_killed_while_they_wait_run_once(
    deployment: Deployment, coord: redis.Redis, kill_at: str
) -> None:
    task = held_task("holds.killed")
    # The caller's own visibility timeout: on a Redis broker restore_visible gives out again at
    # once what the killed worker held unacknowledged: the call it was putting off, and those it
    # prefetched.
    app = deployment.app(broker_transport_options={"visibility_timeout": 1})
    send = task.sender(app)
    run = cli(app)
    assert run("set", "holds.killed").exit_code == 0
    coord.set("kill_at", kill_at)
    doomed = deployment.start(task, "-n", node("killed"), pool="solo", module=LOOKS + KILL)
    results = [send.delay("killed", n) for n in range(3)]
    ids = {result.id for result in results}
    assert poll(lambda: doomed.process.poll() is not None, 30), doomed.log()
    assert "Held holds.killed[" in doomed.log()
    coord.delete("kill_at")
    spare = deployment.start(task, "-c", "2", "-n", node("spare"), module=LOOKS)

    def held_again() -> bool:
        if deployment.urls["broker"].startswith("redis"):  # RabbitMQ gave them out at the kill
            restore_visible(app)
        return held(spare, results) == ids

    # Every call is held again, none lost: the one put off as the worker died has two copies now.
    assert poll(held_again, 30, interval=0.2), spare.log()
    assert ran(coord, "killed") == []
    assert run("lift", "holds.killed").exit_code == 0
    assert results_of(results) == list(range(3))
    # Copies left come due within a second or two of the lift: none runs again.
    assert not poll(lambda: coord.llen("ran:killed") > 3, 6, interval=0.2), spare.log()
    assert ran(coord, "killed") == list(range(3))  # each once
    assert "Dropped copy of holds.killed[" in spare.log()


@pytest.mark.parametrize("pool", ["solo", "threads"])
def test_a_workers_first_call_makes_no_round_trip_for_the_holds(
    make_app: Callable[..., Celery],
    worker: Any,
    lock_server: RedisServer,
    pool: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A lock Redis of the test's own, the lock engine's client counting its round trips.
    app = make_app(redislock_url=lock_server.url, redislock_max_postpone=1)

    @app.task(base=SingletonTask, shared=False, name="holds.first")
    def first(tenant: str, n: int) -> int:
        return n

    client, trips = counting_client(lock_server.url)
    runtime_for(app).engine = LockEngine(client)
    assert first.apply(("warm", 0)).get() == 0  # eager: never held; its lock loads the scripts
    hold_calls(app, "holds.first", {"tenant": "acme"})
    trips.reset()
    with caplog.at_level(logging.INFO), worker(app, pool=pool, concurrency=1):
        # Read as the worker started, before it consumed, on a client of the watch's own.
        assert f"Holds seen by process {os.getpid()}: holds.first tenant=acme until lifted" in caplog.text
        assert trips.count == 0
        assert first.delay("globex", 1).get(timeout=30) == 1
        assert trips.count == 2  # its lock taken and released: nothing asked about the holds
        held_call = first.delay("acme", 2)
        assert poll(lambda: f"Held holds.first[{held_call.id}]" in caplog.text, 30), caplog.text
        assert lift_calls(app, "holds.first", {"tenant": "acme"}) is not None
        assert held_call.get(timeout=30) == 2
