"""Test harnesses: real redis-servers (one, a Sentinel set, a cluster), a RabbitMQ broker,
round-trip counting clients, and a ``celery worker`` subprocess. Nothing here imports pytest; the fixtures built on
these live in ``celery_redislock.contrib.pytest`` (an opt-in pytest plugin)."""

from __future__ import annotations

from .certificates import TestCA, find_openssl
from .rabbitmq import RabbitMQServer, find_rabbitmq_server
from .roundtrips import RoundTrips, counting_client, counting_cluster_client
from .servers import (
    BUNDLED_SERVERS,
    RedisServer,
    conditional_delete_of,
    find_redis_server,
    free_port,
    free_ports,
    poll,
    server_version,
    tls_support,
)
from .topologies import ClusterSet, SentinelSet
from .workers import WorkerNotReady, WorkerProcess

__all__ = [
    "BUNDLED_SERVERS",
    "ClusterSet",
    "RabbitMQServer",
    "RedisServer",
    "RoundTrips",
    "SentinelSet",
    "TestCA",
    "WorkerNotReady",
    "WorkerProcess",
    "conditional_delete_of",
    "counting_client",
    "counting_cluster_client",
    "find_openssl",
    "find_rabbitmq_server",
    "find_redis_server",
    "free_port",
    "free_ports",
    "poll",
    "server_version",
    "tls_support",
]
