"""The project's own test harnesses, beside the package's (``celery_redislock.contrib.testing``:
a throwaway redis-server, a Sentinel set, a cluster, a worker subprocess, which users' tests
use too): a RabbitMQ broker, TLS (a throwaway CA, a redis-server serving TLS), round-trip
counting clients, a PostgreSQL server, a rate limiter's starts, a signal's sends, what a server binary is. For the
tests, the benchmarks and the CI scripts, run from the repository's root (``tests.harness``);
not shipped in the wheel."""

from __future__ import annotations

from celery_redislock.contrib.testing.servers import free_port, free_ports

from .page_text import unbroken
from .postgres import PostgresServer, find_postgres_bin
from .rabbitmq import RabbitMQServer, find_rabbitmq_server
from .rates import GrantRecorder, contend, most_in_a_window, starts_per_period
from .roundtrips import RoundTrips, counting_client, counting_cluster_client
from .signals import collect_requeued_results, postponed_calls, received
from .subprocess_env import module_env
from .tls import TestCA, TLSRedisServer, find_openssl, tls_support
from .versions import conditional_delete_of, server_version

__all__ = [
    "GrantRecorder",
    "PostgresServer",
    "RabbitMQServer",
    "RoundTrips",
    "TLSRedisServer",
    "TestCA",
    "collect_requeued_results",
    "conditional_delete_of",
    "contend",
    "counting_client",
    "counting_cluster_client",
    "find_openssl",
    "find_postgres_bin",
    "find_rabbitmq_server",
    "free_port",
    "free_ports",
    "module_env",
    "most_in_a_window",
    "postponed_calls",
    "received",
    "server_version",
    "starts_per_period",
    "tls_support",
    "unbroken",
]
