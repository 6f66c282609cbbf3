"""`celery inspect redislock_stats` on a real prefork worker (SPEC section 5).

The counters are incremented in the pool's children, but the worker's main process answers
``inspect``: the reply must sum what every child counted. Task bodies coordinate with the test
through Redis (db 3), as in test_prefork_lifecycle.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

import celery_redislock  # noqa: F401  (registers the inspect command in this client)
from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.engine.counting import counter_names
from tests.harness import module_env

from .conftest import WorkerProcess, open_gate, poll, stats_of, wait_started, worker_module

TASKS = """
@app.task(base=SingletonTask, name="stats.quick")
def quick(n):
    return os.getpid()


@app.task(base=SingletonTask, bind=True, name="stats.held", lock_timeout=300)
def held(self, tag):
    hold(self, tag)
    return os.getpid()
"""


def celery_inspect(proc: WorkerProcess, node: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``celery -A <the worker's module> inspect redislock_stats -d node ...``, run for real."""
    args = list(proc.process.args)
    module = args[args.index("-A") + 1]
    workdir = proc.logfile.parent
    celery = [sys.executable, "-m", "celery", "-A", module]
    return subprocess.run(
        [*celery, "inspect", "redislock_stats", "-d", node, "-t", "5", *options],
        cwd=workdir,
        env=module_env(workdir),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_inspect_redislock_stats_sums_the_counters_of_every_prefork_child(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    source = worker_module(urls, "stats", TASKS)
    node = f"stats-{uuid.uuid4().hex[:8]}@test"
    proc = worker_process(source, "-c", "2", "-n", node)
    client = make_app()

    assert SingletonTask  # loading it registers the modes' counters here, as in the worker
    expected = dict.fromkeys(counter_names(), 0)
    assert stats_of(client, node) == {"pid": proc.pid, "counters": expected, "tasks": {}, "lateness": {}}

    # 5 distinct runs: acquired and released 5 times.
    results = [client.send_task("stats.quick", args=[n]) for n in range(5)]
    ran_in = {result.get(timeout=15) for result in results}
    assert ran_in <= set(proc.children), (ran_in, proc.children)

    # One run held open on the gate, 3 duplicates of it skipped meanwhile (by the other child:
    # the holder's is busy). The holder's acquire and the skips are counted in different processes.
    holder = client.send_task("stats.held", args=["h"])
    try:
        [(holder_pid, _)] = wait_started(coord, "h")
        for _ in range(3):
            error = client.send_task("stats.held", args=["h"]).get(timeout=15, propagate=False)
            assert isinstance(error, DuplicateTaskError), error
    finally:
        open_gate(coord, "h")
    assert holder.get(timeout=15) == holder_pid
    assert holder_pid in proc.children and holder_pid != proc.pid

    zero = dict(expected)
    expected.update(acquired=6, released=6, skipped=3)
    # And by task: each task's slot is taken by its first count, in whichever child.
    by_task = {
        "stats.quick": {**zero, "acquired": 5, "released": 5},
        "stats.held": {**zero, "acquired": 1, "released": 1, "skipped": 3},
    }
    whole = {"pid": proc.pid, "counters": expected, "tasks": by_task, "lateness": {}}

    # The release runs after the task body returns: poll until it has landed.
    def settled() -> dict[str, Any] | None:
        reply = stats_of(client, node)
        return reply if reply == whole else None

    assert poll(settled, 15.0), stats_of(client, node)

    # The real CLI: the -A module imports celery_redislock, which makes the name known to it.
    out = celery_inspect(proc, node, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {node: whole}
    # In the order they are registered (tests/unit/test_counting.py pins it), as before.
    assert list(json.loads(out.stdout)[node]["counters"]) == list(counter_names())

    out = celery_inspect(proc, node)
    print(out.stdout)
    assert out.returncode == 0, out.stderr
    assert f"{node}: OK" in out.stdout and '"acquired": 6' in out.stdout, out.stdout
