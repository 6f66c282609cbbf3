"""`celery -A app redislock list` shows each rate-limited partition: its starts in the current
window, the slots reserved for re-published calls, and when a new call could start."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import redis

from celery_redislock.config.arguments import digest
from celery_redislock.engine.rate_decisions import Limit, decide_limits, pause_limits, set_runtime_rates
from celery_redislock.engine.rate_limiter import decide
from celery_redislock.engine.rates import parse_rate, parse_rates
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.gates.rate_calls import named_log, overrides_of
from celery_redislock.gates.rate_limit import rate_key

from . import test_cli
from .test_cli import ADD, REPORT, Run, lock_key

#: The fixture of test_cli: an app module, and the real celery program run on it.
celery_cmd = test_cli.celery_cmd


def test_list_shows_each_rate_limited_partition(celery_cmd: Callable[..., Run], locks: redis.Redis) -> None:
    celery = celery_cmd(redislock_options={"global_rate_limit": "3/m"})
    scripts = ScriptRunner(locks)
    busy, quiet = rate_key(lock_key(ADD, "acme")), rate_key(lock_key(ADD, "other"))
    decided = time.monotonic()
    for caller in ("a", "b", "c", "d"):  # three start, the fourth reserves the next slot
        decide(scripts, busy, parse_rate("3/m"), caller, reserve=True)
    decide(scripts, quiet, parse_rate("3/m"), "e", reserve=True)
    locks.set(lock_key(REPORT, "x"), "task-x@worker:1:1", px=60_000)
    result = celery("redislock", "list")
    # What the listing shows counts down while the command starts (slowly on a busy host).
    took = time.monotonic() - decided
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "1 lock(s) held, 2 mode key(s)"
    rows = {line.split()[0]: line for line in lines[2:-1]}
    assert set(rows) == {busy, quiet}
    assert "rate limit 3/m: 3 started in the window, 1 reserved, next free slot in " in rows[busy]
    # The reserved slot is a minute on (the three starts leave the window then); a new call's
    # comes a third of a minute after it (a backlog is spread over the period).
    assert 80 - took - 1 < float(rows[busy].split("next free slot in ")[1].split("s")[0]) <= 80.001
    assert "rate limit 3/m: 1 started in the window, 0 reserved, next free slot now" in rows[quiet]
    assert rows[busy].split()[1] == ADD
    # The log lives until its newest entry no longer counts: a reserved slot a period on.
    assert 120 - took - 1 < float(rows[busy].split()[-1]) <= 121
    listed = json.loads(celery("redislock", "list", "--task", ADD, "--json").stdout)
    assert sorted(item["key"] for item in listed) == sorted([busy, quiet])


def test_list_without_a_known_rate_says_so(celery_cmd: Callable[..., Run], locks: redis.Redis) -> None:
    celery = celery_cmd()
    key = rate_key(lock_key(ADD, "acme"))
    decide(ScriptRunner(locks), key, parse_rate("3/m"), "a", reserve=True)
    result = celery("redislock", "list")
    assert result.returncode == 0, result.stderr
    assert "rate limit: no global_rate_limit known here for its task" in result.stdout


def test_list_shows_each_named_limit_partition(celery_cmd: Callable[..., Run], locks: redis.Redis) -> None:
    # Seen red before named partitions had rows: only the global_rate_limit row was listed.
    celery = celery_cmd(redislock_limits={"partner": "3/m", "llm": "5/s"})
    scripts = ScriptRunner(locks)
    one = named_log("redislock", "partner")
    acme = named_log("redislock", "partner", digest("acme"))
    limits = (Limit(one, parse_rates("3/m"), "partner"),)
    for caller in ("a", "b", "c", "d"):  # three start, the fourth reserves the next slot
        decide_limits(scripts, limits, caller, reserve=True)
    decide_limits(scripts, (Limit(acme, parse_rates("3/m"), "partner"),), "e", reserve=True)
    paused = named_log("redislock", "llm")
    pause_limits(scripts, (Limit(paused, parse_rates("5/s"), "llm"),), 60)
    # A runtime rate set since is what the rows count by.
    set_runtime_rates(locks, overrides_of("redislock"), "partner", "4/m")
    global_log = rate_key(lock_key(ADD, "x"))
    decide(scripts, global_log, parse_rate("3/m"), "f", reserve=True)
    result = celery("redislock", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert set(rows) == {one, acme, paused, global_log}, result.stdout
    assert lines[-1] == "0 lock(s) held, 4 mode key(s)"
    assert "limit partner 4/m: 3 started in the window, 1 reserved, next free slot in " in rows[one]
    assert "limit partner 4/m: 1 started in the window, 0 reserved, next free slot now" in rows[acme]
    # Paused before any call was decided: a row all the same, saying for how long.
    assert "limit llm 5/s: 0 started in the window, 0 reserved, next free slot in " in rows[paused]
    assert float(rows[paused].split("paused for ")[1].split("s")[0]) > 50
    # No task of this app names the limits: the task column says so; --task keeps only the limits
    # the task names.
    assert rows[one].split()[1] == "-"
    listed = json.loads(celery("redislock", "list", "--task", ADD, "--json").stdout)
    assert [item["key"] for item in listed] == [global_log]
