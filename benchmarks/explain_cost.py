"""What the record of decisions (``explain``) costs the lock Redis: its memory per call
(``MEMORY USAGE`` of a call's record) and the server's time per decision (``INFO
commandstats``: the usec_per_call of the commands a decision runs, with the record and without).

    python -m benchmarks.explain_cost [--n 20000] [--redis-server system]

Run through the engine's own calls on a throwaway redis-server (no Celery: the same commands a
worker sends): the uncontended path's ``SET NX`` with the record's two commands in its write
(``CLIENT REPLY SKIP`` each), and the acquire script, refused, plain and wrapped by
``record.lua``. The Python side of the uncontended path is ``benchmarks.task_path --instructions``'s.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine.decision_record import LOCK_DECISION, RECORD_LENGTH, Recorder
from celery_redislock.engine.keys import record_key
from celery_redislock.engine.lock_engine import LockEngine

from .servers import add_server_option, server_executable, server_version

#: A day, the default ``redislock_explain_ttl``.
TTL = 24 * 3600.0
KEY = "redislock:proj.tasks.report:0123456789abcdef0123456789abcdef"


def stats(client: redis.Redis) -> dict[str, Any]:
    return dict(client.info("commandstats"))


def usec(before: dict[str, Any], after: dict[str, Any], command: str) -> tuple[int, float]:
    """Calls of ``command`` between the two snapshots and the server's µs per call among them."""
    name = f"cmdstat_{command}"
    was = before.get(name, {"calls": 0, "usec": 0})
    now = after.get(name, {"calls": 0, "usec": 0})
    calls = int(now["calls"]) - int(was["calls"])
    return calls, (int(now["usec"]) - int(was["usec"])) / calls if calls else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20000, help="calls per measure")
    add_server_option(parser)
    args = parser.parse_args()
    executable = server_executable(args.redis_server)
    print(f"redis-server {server_version(executable)}, {args.n} calls per measure, record TTL {TTL:g}s")
    with RedisServer(executable=executable) as server:
        client = server.client()
        engine = LockEngine(client, hold_connection=True)
        recorder = Recorder("redislock", TTL)
        ids = [str(uuid.uuid4()) for _ in range(args.n)]

        # The uncontended path: SET NX and, in its write, LPUSH and PEXPIRE of the record.
        before = stats(client)
        for task_id in ids:
            key = f"{KEY}{task_id[:4]}"
            engine.take(
                key, f"{task_id}@bench:1:1", 30_000, recorder.take_quiet(task_id, key, "proj.tasks.report")
            )
            client.delete(key)
        after = stats(client)
        print("uncontended acquire, with the record in its write (per call):")
        for command in ("set", "client|reply", "client", "lpush", "pexpire"):
            calls, per = usec(before, after, command)
            if calls:
                print(f"  {command:<14} {calls:>7} calls  {per:6.2f} µs of server time each")
        take = int(client.memory_usage(record_key("redislock", ids[0])) or 0)
        print(f"  memory of a call's record with its one entry: {take} bytes (MEMORY USAGE)")

        # A refused call: the acquire script plain, then wrapped (the record an extra key).
        client.set(KEY, "holder@elsewhere:1:1", px=600_000)
        before = stats(client)
        for _ in ids:
            engine.acquire(KEY, "me@bench:1:1", 30_000, expect_free=False)
        middle = stats(client)
        for task_id in ids:
            record = recorder.record(task_id, LOCK_DECISION, KEY, "skip", "5", "0")
            engine.acquire(KEY, "me@bench:1:1", 30_000, expect_free=False, record=record)
        after = stats(client)
        _, plain = usec(before, middle, "evalsha")
        _, wrapped = usec(middle, after, "evalsha")
        print("refused acquire (the acquire script), per decision:")
        print(f"  plain {plain:.2f} µs, recorded {wrapped:.2f} µs: the record adds {wrapped - plain:.2f} µs")
        one = int(client.memory_usage(record_key("redislock", ids[1])) or 0)
        print(f"  memory of a call's record with one script entry: {one} bytes")
        for _ in range(40):  # a call refused again and again: its record stays capped
            engine.acquire(KEY, "me@bench:1:1", 30_000, expect_free=False, record=record)
        full = int(client.memory_usage(record_key("redislock", ids[-1])) or 0)
        print(f"  memory of a call's record at its cap of {RECORD_LENGTH} entries: {full} bytes")
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
