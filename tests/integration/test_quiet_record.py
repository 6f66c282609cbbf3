"""The uncontended path's record (``explain``) sent quiet, after a ``CLIENT REPLY SKIP`` each,
against a real redis-server: a server that stops taking ``CLIENT REPLY`` while the connection is
open (an ACL changed) answers the refused skip and the command after it, replies nobody reads.
The connection must never be read out of step: a later ``SET NX`` must not take one of those
replies for its own and report a held key taken."""

from __future__ import annotations

import uuid

import redis

from celery_redislock.contrib.testing import RedisServer
from celery_redislock.engine import AcquireStatus, LockEngine
from celery_redislock.engine.decision_record import LOCK_DECISION, Recorder


def key(n: str) -> str:
    return f"redislock:proj.report:{n * 32}"


def test_a_refused_reply_skip_never_puts_the_connection_out_of_step(
    redislock_server: RedisServer, redislock_redis: redis.Redis
) -> None:
    redislock_redis.acl_setuser(
        "locker", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    client = redis.Redis.from_url(f"redis://locker:pw@127.0.0.1:{redislock_server.port}/0")
    try:
        engine = LockEngine(client, hold_connection=True)
        recorder = Recorder("redislock", 3600.0)

        def acquire(key: str, task_id: str) -> AcquireStatus | None:
            record = recorder.record(task_id, LOCK_DECISION, key)
            return engine.acquire(key, f"{task_id}@w:1:1", 5_000, record=record).status

        assert acquire(key("1"), str(uuid.uuid4())) is AcquireStatus.TAKEN  # quiet taken
        try:
            redislock_redis.acl_setuser("locker", enabled=True, commands=["-client|reply"])
        except redis.ResponseError:  # Redis 6 takes no subcommand in an ACL: all of CLIENT
            redislock_redis.acl_setuser("locker", enabled=True, commands=["-client"])
        # Refused skips: their errors, and the record commands' replies, come back unasked.
        acquire(key("2"), str(uuid.uuid4()))
        redislock_redis.set(key("3"), "someone-else@w:1:1", px=60_000)
        outcomes = []
        for _ in range(4):  # a stale reply read as a SET NX's answer: a held key "taken"
            try:
                outcomes.append(acquire(key("3"), str(uuid.uuid4())))
            except redis.RedisError as error:
                outcomes.append(type(error).__name__)  # type: ignore[arg-type]
        assert AcquireStatus.TAKEN not in outcomes, outcomes
        # At most the first fails (it read a stale error); the connection is dropped with the
        # rest, and the next ones, on a new connection (asked again: no skips), see it held.
        assert outcomes[1:] == [None, None, None], outcomes
        assert redislock_redis.get(key("3")) == b"someone-else@w:1:1"
    finally:
        client.close()
        redislock_redis.acl_deluser("locker")
