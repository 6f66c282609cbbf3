"""What one decision over 1, 2 and 3 rate limits costs Redis, each limit a large full window.

    python -m benchmarks.rate_limits [--size 100000] [--waiting 1000] [--calls 200]
                                     [--redis-server ...]

For each number of limits, every limit a ``"<size>/h"`` window log filled as
``benchmarks.rate_partition`` fills one (``--size`` starts over the last hour, the same
``--waiting`` calls holding reserved slots in each), all under one hash tag as limits decided
together must be. Then ``--calls`` decisions of each kind through ``rate_decisions.decide_limits``
(the script the gate and ``RedisRateLimiter`` run): a new call (reserves its slot in every limit),
a call back early (keeps it), a call back due into full windows (counts every window's starts,
finds when room comes). Redis time per call as ``rate_partition`` reads it: ``INFO
commandstats``' mean and SLOWLOG's median and max, in µs.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from typing import Any

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.rate_decisions import Limit, decide_limits
from celery_redislock.engine.rates import Rate
from celery_redislock.engine.script_runner import ScriptRunner

from .rate_partition import due_now, fill, parse_sizes, timed
from .servers import server_executable

#: The most limits measured: 1, 2, ... of them decided together.
MOST = 3


def limits_of(count: int, rate: Rate) -> tuple[Limit, ...]:
    return tuple(Limit(f"{{bench}}:rate:limit{n}", (rate,), f"limit{n}") for n in range(count))


def run_one(server: RedisServer, args: argparse.Namespace, count: int) -> dict[str, dict[str, float]]:
    """The figures of each kind of decision over ``count`` limits, on a flushed database."""
    rate = Rate(args.size, 3600)
    client = server.client(db=3)
    try:
        client.flushdb()
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", args.calls + 1000)
        scripts = ScriptRunner(client)
        limits = limits_of(count, rate)
        decide_limits(scripts, limits_of(count, Rate(1, 1)), "warm", reserve=True)  # the script loaded
        held = fill(client, rate, args.size, args.waiting + 2 * args.calls, limits[0].key)
        for limit in limits[1:]:
            fill(client, rate, args.size, 0, limit.key, held)
        early, due = held[: args.calls], held[args.calls : 2 * args.calls]

        def come_back(pairs: list[tuple[str, str]]) -> Callable[[int], Any]:
            def call(i: int) -> Any:
                task_id, token = pairs[i]
                return decide_limits(scripts, limits, task_id, reserve=True, token=token, next_token=token)

            return call

        results = {
            "new call": timed(
                client,
                args.calls,
                lambda i: decide_limits(scripts, limits, str(uuid.uuid4()), reserve=True, next_token="t"),
            ),
            "come-back, early": timed(client, args.calls, come_back(early)),
        }
        for limit in limits:
            due_now(client, due, limit.key)
        results["come-back, due, windows full"] = timed(client, args.calls, come_back(due))
        return results
    finally:
        client.close()


def run(args: argparse.Namespace) -> dict[int, dict[str, dict[str, float]]]:
    with RedisServer(server_executable(args.redis_server)) as server:
        return {count: run_one(server, args, count) for count in range(1, MOST + 1)}


def report(outcome: dict[int, dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        f'Decisions over 1 to {MOST} limits of "{args.size}/h", each window full ({args.size} starts), '
        f"{args.waiting + 2 * args.calls} calls waiting; Redis time of one decision (µs, {args.calls} calls each):",
        "",
        "| limits | decision | commandstats mean | SLOWLOG median | SLOWLOG max |",
        "|---:|---|---:|---:|---:|",
    ]
    for count, results in outcome.items():
        for name, figures in results.items():
            lines.append(
                f"| {count} | {name} | {figures['mean']:.1f} | {figures['median']:.0f} | {figures['max']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_sizes("python -m benchmarks.rate_limits", __doc__, argv)
    print(report(run(args), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
