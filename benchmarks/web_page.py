"""How long the web page (``celery redislock web``) takes to answer as the locks grow.

    python -m benchmarks.web_page [--locks 1000,10000,100000] [--repeat 3] [--redis-server ...]

Fills a throwaway redis-server with ``--locks`` held locks (ten tasks, the real key and holder
forms) and times a GET of the page through Flask's test client: every lock (the page shows
500 and says more match), one task's (filtered by SCAN's pattern), and a key search (the keys
read before their holders). Each is the median of ``--repeat`` views. Wall-clock time of one
Python process and one redis-server on loopback: it varies with the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from celery import Celery

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.holders import holder_id
from celery_redislock.engine.keys import format_key
from celery_redislock.ops.web import create_app

from .servers import add_server_option, server_executable

VIEWS = {"every lock": {}, "one task's": {"task": "bench.task3"}, "key search": {"q": "00ff"}}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web_page", description=__doc__.split("\n")[0])
    parser.add_argument("--locks", default="1000,10000,100000", help="lock counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="views timed per count and kind")
    add_server_option(parser)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> list[tuple[int, str, float, int]]:
    """``(locks, view, median seconds, page bytes)`` for each lock count and view."""
    found = []
    with RedisServer(server_executable(args.redis_server)) as server:
        client = server.client(db=2)
        app = Celery("bench_web", set_as_current=False, broker=f"redis://127.0.0.1:{server.port}/0")
        app.conf.redislock_url = f"redis://127.0.0.1:{server.port}/2"
        page = create_app(app, poll_interval=3600)
        view = page.test_client()
        try:
            for count in sorted(int(n) for n in args.locks.split(",")):
                have = int(client.dbsize())
                pipe = client.pipeline(transaction=False)
                for i in range(have, count):
                    key = format_key("redislock", f"bench.task{i % 10}", f"{i:032x}")
                    pipe.set(key, holder_id(f"task-{i}", "celery@bench"), px=3_600_000)
                pipe.execute()
                for name, query in VIEWS.items():
                    times, size = [], 0
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        response = view.get("/", query_string=query)
                        times.append(time.perf_counter() - start)
                        assert response.status_code == 200, response.status_code
                        size = len(response.data)
                    found.append((count, name, statistics.median(times), size))
        finally:
            page.extensions["redislock"].stop()
            client.close()
    return found


def report(rows: list[tuple[int, str, float, int]]) -> str:
    lines = ["| locks | view | median time | page |", "|---:|---|---:|---:|"]
    for count, name, seconds, size in rows:
        lines.append(f"| {count:,} | {name} | {seconds * 1000:,.0f} ms | {size / 1024:,.0f} KiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    print(report(run(parse(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
