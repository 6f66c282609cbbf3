"""What one decision of a large rate-limited partition costs Redis, and what the partition holds.

    python -m benchmarks.rate_partition [--size 100000] [--waiting 1000] [--calls 200]
                                        [--redis-server ...]

A partition of ``"<size>/h"`` with its window full: ``--size`` starts spread over the last hour
and ``--waiting`` calls holding reserved slots, filled in the real key and member forms
(``keys.rate_keys``, ``grant_member``, ``reservation_member``). Then ``--calls`` decisions of
each kind, through the same script the gate runs, each kind timed by the server:

- **new call**: a task id never seen, which reserves the next free slot;
- **come-back, early**: a call back before its slot (keeps it, goes back again);
- **come-back, due, window full**: a call back at its slot while the window holds N starts
  (counts the window's starts, finds when room comes) - the path that scanned the window before;
- **copy dropped**: a second copy of a waiting call.

Redis time per call is ``INFO commandstats``' usec_per_call of EVALSHA and SLOWLOG's per-call
durations (slowlog-log-slower-than 0: every command is logged), median and max. Lua runs alone
on the server: this is how long every other client waits. Memory is ``MEMORY USAGE ... SAMPLES
0`` (exact) of the partition's three keys.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from collections.abc import Callable
from typing import Any

import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.keys import grant_member, rate_keys, reservation_member
from celery_redislock.engine.rate_limiter import decide
from celery_redislock.engine.rates import Rate
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.engine.timing import server_time, to_ms

from .servers import add_server_option, server_executable

KEY = "{redislock:bench.partition:0123456789abcdef0123456789abcdef}:rate"
FILL_BATCH = 10_000


def fill(
    client: redis.Redis,
    rate: Rate,
    size: int,
    waiting: int,
    key: str = KEY,
    held: list[tuple[str, str]] | None = None,
) -> list[tuple[str, str]]:
    """Fill the partition logged at ``key``: ``size`` starts over the last period, ``waiting``
    reserved slots after now (the copy holding each named by a token), or those of ``held``;
    returns ``(task id, token)`` of those."""
    log, reserved, hops = rate_keys(key)
    now = to_ms(server_time(client))
    period = rate.period_ms
    pipe = client.pipeline(transaction=False)
    for first in range(0, size, FILL_BATCH):
        count = min(FILL_BATCH, size - first)
        # Oldest first, the newest a moment ago: the window is full.
        pipe.zadd(
            log,
            {
                grant_member(str(uuid.uuid4())): now - period + 1 + (first + i) * period // size
                for i in range(count)
            },
        )
        pipe.execute()
    if held is None:
        held = [(str(uuid.uuid4()), uuid.uuid4().hex) for _ in range(waiting)]
    if held:
        slots = {reservation_member(task_id): now + period + i for i, (task_id, _) in enumerate(held)}
        pipe.zadd(log, slots)
        pipe.zadd(reserved, slots)
        pipe.hset(hops, mapping={reservation_member(task_id): f"{token}|" for task_id, token in held})
        for key in (log, reserved, hops):
            pipe.pexpire(key, 2 * period)
        pipe.execute()
    return held


def due_now(client: redis.Redis, held: list[tuple[str, str]], key: str = KEY) -> None:
    """Move the reserved slots of ``held`` to now: their calls come back due, into a full window."""
    log, reserved, _ = rate_keys(key)
    now = to_ms(server_time(client))
    slots = {reservation_member(task_id): now - 1 for task_id, _ in held}
    client.zadd(log, slots)
    client.zadd(reserved, slots)


def timed(client: redis.Redis, calls: int, call: Callable[[int], Any]) -> dict[str, float]:
    """Redis' own time of ``call(i)`` for i < ``calls``: commandstats' mean µs per EVALSHA, and
    SLOWLOG's median and max µs."""
    client.config_resetstat()
    client.slowlog_reset()
    for i in range(calls):
        call(i)
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    durations = [entry["duration"] for entry in client.slowlog_get(calls + 100) if _is_evalsha(entry)]
    return {
        "mean": float(stats.get("usec_per_call", 0.0)),
        "median": float(statistics.median(durations)) if durations else 0.0,
        "max": float(max(durations)) if durations else 0.0,
        "calls": float(len(durations)),
    }


def _is_evalsha(entry: dict[str, Any]) -> bool:
    command = entry.get("command", b"")
    text = command.decode() if isinstance(command, bytes) else str(command)
    return text.upper().startswith("EVALSHA")


def memory(client: redis.Redis) -> dict[str, int]:
    return {key: int(client.memory_usage(key, samples=0) or 0) for key in rate_keys(KEY)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rate = Rate(args.size, 3600)
    with RedisServer(server_executable(args.redis_server)) as server:
        client = server.client(db=2)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", args.calls + 1000)
        scripts = ScriptRunner(client)
        decide(scripts, "bench:warm", rate, "warm", reserve=True)  # the script loaded
        held = fill(client, rate, args.size, args.waiting + 2 * args.calls)
        filled = memory(client)
        early, due, copies = held[: args.calls], held[args.calls : 2 * args.calls], held[2 * args.calls :]

        def come_back(pairs: list[tuple[str, str]]) -> Callable[[int], Any]:
            def call(i: int) -> Any:
                task_id, token = pairs[i]
                return decide(scripts, KEY, rate, task_id, reserve=True, token=token, next_token=token)

            return call

        results = {
            "new call": timed(
                client,
                args.calls,
                lambda i: decide(scripts, KEY, rate, str(uuid.uuid4()), reserve=True, next_token="t"),
            ),
            "come-back, early": timed(client, args.calls, come_back(early)),
        }
        due_now(client, due)
        results["come-back, due, window full"] = timed(client, args.calls, come_back(due))
        stale = [(task_id, "stale") for task_id, _ in copies[: args.calls] or early]
        results["copy dropped"] = timed(client, min(args.calls, len(stale)), come_back(stale))
        client.close()
    return {"results": results, "memory": filled, "entries": args.size + len(held)}


def report(outcome: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f'A "{args.size}/h" partition, window full ({args.size} starts), {outcome["entries"] - args.size} '
        f"calls waiting; Redis time of one decision (µs, {args.calls} calls each):",
        "",
        "| decision | commandstats mean | SLOWLOG median | SLOWLOG max |",
        "|---|---:|---:|---:|",
    ]
    for name, figures in outcome["results"].items():
        lines.append(f"| {name} | {figures['mean']:.1f} | {figures['median']:.0f} | {figures['max']:.0f} |")
    log, reserved, hops = (outcome["memory"][key] for key in rate_keys(KEY))
    total = log + reserved + hops
    lines += [
        "",
        f"Memory of the partition (MEMORY USAGE, filled): log {log / 1e6:.2f} MB, reservations "
        f"{reserved / 1e3:.1f} KB, hop tokens {hops / 1e3:.1f} KB; {total / 1e6:.2f} MB in all, "
        f"{total / outcome['entries']:.0f} bytes an entry.",
    ]
    return "\n".join(lines)


def parse_sizes(prog: str, description: str | None, argv: list[str] | None) -> argparse.Namespace:
    """The options of this benchmark and of ``rate_limits``: ``--size``, ``--waiting``,
    ``--calls`` (checked) and ``--redis-server``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--size", type=int, default=100_000, help="N of 'N/h': starts in a full window")
    parser.add_argument("--waiting", type=int, default=1000, help="calls holding reserved slots")
    parser.add_argument("--calls", type=int, default=200, help="decisions timed of each kind")
    add_server_option(parser)
    args = parser.parse_args(argv)
    if args.size < 1 or args.calls < 1 or args.waiting < 0:
        parser.error("--size and --calls must be >= 1, --waiting >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_sizes("python -m benchmarks.rate_partition", __doc__, argv)
    print(report(run(args), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
