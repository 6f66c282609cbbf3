"""Fixtures shared by the integration and worker tests: the session's Sentinel set and
cluster (from celery_redislock.testing), flushed after each test that used them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_redislock.testing import ClusterSet, SentinelSet


@pytest.fixture
def sentinels(redislock_sentinel: SentinelSet) -> Iterator[SentinelSet]:
    yield redislock_sentinel
    redislock_sentinel.flush()


@pytest.fixture
def cluster(redislock_cluster: ClusterSet) -> Iterator[ClusterSet]:
    yield redislock_cluster
    redislock_cluster.flush()
