"""What an operator's view costs the lock Redis as a fair queue's tenants and a named limit's
partitions grow: ``celery redislock fair show``, ``limit show`` and a view of the web page.

    python -m benchmarks.ops_views [--tenants 10000] [--partitions 5000] [--repeat 3] [--redis-server ...]

Fills a throwaway redis-server with ``--tenants`` tenants of one fair queue (a task with
``fair_cap=2``, a call of each queued, each sent through the real lane assignment) and
``--partitions`` partitions of a named limit (each decided once by the real decision), then
runs each view ``--repeat`` times in this process: ``fair show`` and ``limit show`` as the CLI
formats them, the page through Flask's test client. Per view: the commands Redis ran (``INFO
commandstats``, a script's own commands counted inside), the round trips this process made
(writes to its sockets), the median wall time and the page's size. Time is one process and one
redis-server on loopback on a shared machine; the commands and round trips do not vary.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from celery import Celery
from redis.connection import AbstractConnection

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.fair_lanes import FairLanes
from celery_redislock.engine.rate_decisions import Limit, decide_limits
from celery_redislock.gates.rate_calls import catalog_of, named_log, overrides_of
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops import fair_cli, limit_cli
from celery_redislock.ops.fair import show_fair
from celery_redislock.ops.limits import show_limits
from celery_redislock.ops.web import create_app

from .servers import add_server_option, server_executable

#: The named limit whose partitions are made, and its rate (wide enough that nothing waits).
LIMIT, RATE = "api", "1000000/h"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ops_views", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tenants", type=int, default=10_000, help="tenants with a call queued")
    parser.add_argument("--partitions", type=int, default=5_000, help="partitions of the named limit")
    parser.add_argument("--repeat", type=int, default=3, help="times each view is run (the median is shown)")
    add_server_option(parser)
    return parser.parse_args(argv)


def commands_run(client: redis.Redis) -> int:
    """Every command the server has run, but ``INFO`` (this count's own)."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(row["calls"]) for name, row in stats.items() if name != "cmdstat_info")


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts the writes of every connection of this process (a pipeline is one): ``[count]``."""
    count = [0]
    original = AbstractConnection.send_packed_command

    def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        count[0] += 1
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        yield count
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def fill(app: Celery, tenants: int, partitions: int) -> None:
    runtime = runtime_for(app)
    prefix = runtime.settings.key_prefix
    lanes = FairLanes(runtime.scripts, prefix, "celery")
    for n in range(tenants):
        lanes.assign(f"tenant-{n:05d}", f"call-{n}", 16)
    rates = catalog_of(runtime)[LIMIT].rates
    for n in range(partitions):
        limit = Limit(named_log(prefix, LIMIT, f"{n:032x}"), rates, LIMIT, overrides_of(prefix))
        decide_limits(runtime.scripts, [limit], f"call-{n}", reserve=False)


def run(args: argparse.Namespace) -> list[tuple[str, int, int, float, int]]:
    """``(view, commands, round trips, median seconds, bytes shown)`` of each view."""
    found = []
    with RedisServer(server_executable(args.redis_server)) as server:
        client = server.client(db=2)
        app = Celery("bench_views", set_as_current=False, broker=f"redis://127.0.0.1:{server.port}/0")
        app.conf.redislock_url = f"redis://127.0.0.1:{server.port}/2"
        app.conf.redislock_limits = {LIMIT: RATE}

        @app.task(base=SingletonTask, shared=False, name="bench.fair", fair_key=["tenant"], fair_cap=2)
        def fair(tenant: str) -> None:
            pass

        page = create_app(app, poll_interval=3600)
        view = page.test_client()

        def web() -> int:
            response = view.get("/")
            assert response.status_code == 200, response.status_code
            return len(response.data)

        def fair_show() -> int:
            return len("\n".join(line for info in show_fair(app) for line in fair_cli._lines(info)))

        def limit_show() -> int:
            return len("\n".join(line for info in show_limits(app) for line in limit_cli._lines(info)))

        views: dict[str, Callable[[], int]] = {
            "fair show": fair_show,
            "limit show": limit_show,
            "web page": web,
        }
        try:
            fill(app, args.tenants, args.partitions)
            for name, shown in views.items():
                times, commands, trips, size = [], 0, 0, 0
                for _ in range(args.repeat):
                    before = commands_run(client)
                    with round_trips() as count:
                        start = time.perf_counter()
                        size = shown()
                        times.append(time.perf_counter() - start)
                    commands, trips = commands_run(client) - before, count[0]
                found.append((name, commands, trips, statistics.median(times), size))
        finally:
            page.extensions["redislock"].stop()
            client.close()
    return found


def report(args: argparse.Namespace, rows: list[tuple[str, int, int, float, int]]) -> str:
    lines = [
        f"{args.tenants:,} tenants of one fair queue (`fair_cap=2`), {args.partitions:,} partitions "
        f"of one named limit:",
        "",
        "| view | Redis commands | round trips | median time | output |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, commands, trips, seconds, size in rows:
        lines.append(
            f"| {name} | {commands:,} | {trips:,} | {seconds * 1000:,.0f} ms | {size / 1024:,.0f} KiB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    print(report(args, run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
