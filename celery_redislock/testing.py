"""Deprecated: the harnesses moved to ``celery_redislock.contrib.testing`` (no pytest import)
and the fixtures to ``celery_redislock.contrib.pytest`` (still loaded by pytest on its own)."""

from __future__ import annotations

import warnings

from .contrib.testing import (
    ClusterSet,
    RedisServer,
    RoundTrips,
    SentinelSet,
    counting_client,
    counting_cluster_client,
    find_redis_server,
    free_port,
    free_ports,
    poll,
)

__all__ = [
    "ClusterSet",
    "RedisServer",
    "RoundTrips",
    "SentinelSet",
    "counting_client",
    "counting_cluster_client",
    "find_redis_server",
    "free_port",
    "free_ports",
    "poll",
]

warnings.warn(
    "celery_redislock.testing is deprecated: import from celery_redislock.contrib.testing",
    DeprecationWarning,
    stacklevel=2,
)
