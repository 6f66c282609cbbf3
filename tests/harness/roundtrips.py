"""Clients that count their round trips to Redis (one per request written; a pipeline is one)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis
from redis.cluster import RedisCluster

from celery_redislock.config.lock_client import make_client

__all__ = ["RoundTrips", "counting_client", "counting_cluster_client"]


class RoundTrips:
    """How many requests a client wrote to Redis: one per round trip (a pipeline is one).

    A new connection's hand-shake (HELLO, CLIENT SETINFO, SELECT) is not counted: it is paid
    once per pooled connection, not per operation. ``by_node`` splits the count by
    ``host:port``, which tells a cluster's nodes apart.
    """

    def __init__(self) -> None:
        self.count = 0
        self.by_node: Counter[str] = Counter()

    def reset(self) -> None:
        self.count = 0
        self.by_node.clear()


def _counting_connection(trips: RoundTrips) -> type[redis.Connection]:
    class CountingConnection(redis.Connection):
        # The hand-shake of a new connection is not a call's round trip. redis-py 5.0 runs it
        # in on_connect, later releases in on_connect_check_health (which calls on_connect).
        handshaking = 0

        def on_connect(self) -> None:
            self.handshaking += 1
            try:
                super().on_connect()  # type: ignore[no-untyped-call]
            finally:
                self.handshaking -= 1

        def on_connect_check_health(self, check_health: bool = True) -> None:
            self.handshaking += 1
            try:
                super().on_connect_check_health(check_health)
            finally:
                self.handshaking -= 1

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            if not self.handshaking:
                trips.count += 1
                trips.by_node[f"{self.host}:{self.port}"] += 1
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    return CountingConnection


def counting_client(url: str) -> tuple[redis.Redis, RoundTrips]:
    """A client to ``url`` that counts its round trips, and the counter it updates."""
    trips = RoundTrips()
    pool = redis.ConnectionPool.from_url(url, connection_class=_counting_connection(trips))
    client: redis.Redis = redis.Redis(connection_pool=pool)
    client.ping()  # connect now, so the hand-shake is not counted against the caller
    trips.reset()
    return client, trips


def counting_cluster_client(url: str) -> tuple[RedisCluster, RoundTrips]:
    """A cluster client for a ``?cluster=true`` lock URL that counts its round trips per node."""
    trips = RoundTrips()
    client = make_client(url, connection_class=_counting_connection(trips))
    if not isinstance(client, RedisCluster):
        raise ValueError(f"{url!r} is not a cluster URL (add ?cluster=true)")
    trips.reset()  # the slot map it read at start is not the caller's
    return client, trips
