"""Test harnesses: real redis-servers (one, a Sentinel set, a cluster), a RabbitMQ broker,
round-trip counting clients, a ``celery worker`` subprocess, and a rate limiter's starts.
Nothing here imports pytest; the fixtures built on these live in
``celery_redislock.contrib.pytest`` (an opt-in pytest plugin)."""

from __future__ import annotations

from .certificates import TestCA, find_openssl
from .rabbitmq import RabbitMQServer, find_rabbitmq_server
from .rates import GrantRecorder, most_in_a_window, starts_per_period
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
    "GrantRecorder",
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
    "most_in_a_window",
    "poll",
    "server_version",
    "starts_per_period",
    "tls_support",
]
