"""What a user's own tests of ``SingletonTask``s need: a throwaway redis-server (one, a Sentinel
set, a cluster) and a ``celery worker`` subprocess, started and stopped by pid. Nothing here
imports pytest; the fixtures built on these live in ``celery_redislock.contrib.pytest`` (an
opt-in pytest plugin). docs/testing.md documents each name."""

from __future__ import annotations

from .servers import RedisServer, find_redis_server, poll
from .topologies import ClusterSet, SentinelSet
from .workers import WorkerNotReady, WorkerProcess

__all__ = [
    "ClusterSet",
    "RedisServer",
    "SentinelSet",
    "WorkerNotReady",
    "WorkerProcess",
    "find_redis_server",
    "poll",
]
