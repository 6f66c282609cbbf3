"""The dedup modes' scripts on a real Redis Cluster: each touches keys of one slot only (the lock
key and its ``{lock key}:…`` keys), so none fails with CROSSSLOT, on every node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from celery_redislock.contrib.testing import ClusterSet
from celery_redislock.core.modes import ModeEngine
from celery_redislock.urls import make_client


@pytest.fixture
def client(cluster: ClusterSet) -> Iterator[RedisCluster]:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


#: No delivery of these calls' messages holds a lock twice here.
DELIVERIES = "none-of-these@"


def keys_on_every_node(client: RedisCluster) -> list[str]:
    keys = [f"redislock:modes:{n}" for n in range(30)]
    assert len({client.get_node_from_key(key).name for key in keys}) == 3
    return keys


def test_throttle_keep_latest_and_debounce_scripts_on_every_node(client: RedisCluster) -> None:
    modes = ModeEngine(client)
    for key in keys_on_every_node(client):
        # keep_latest: the first call takes the lock, the next is pending, a later one replaces it.
        assert (
            modes.keep_latest(key, "a@w:1", 10_000, "a", 60_000, recheck=False, deliveries=DELIVERIES).status
            == "run"
        )
        assert (
            modes.keep_latest(key, "b@w:2", 10_000, "b", 60_000, recheck=False, deliveries=DELIVERIES).status
            == "pending"
        )
        assert (
            modes.keep_latest(key, "c@w:3", 10_000, "c", 60_000, recheck=False, deliveries=DELIVERIES).status
            == "pending"
        )
        replaced = modes.keep_latest(key, "b@w:4", 10_000, "b", 60_000, recheck=True, deliveries=DELIVERIES)
        assert (replaced.status, replaced.other) == ("replaced", "c")
        # throttle: the run's end keeps its key for the rest of the window.
        assert modes.end_throttle(key, "a@w:1", "a@throttled", 5_000, "") == 2
        assert 0 < client.pttl(key) <= 5_000 and client.get(key) == b"a@throttled"
        client.delete(key)
        # debounce: the first call is delayed in full, the latest runs, earlier ones are superseded.
        assert modes.debounce_call(key, "d1", 1_000, 1_500, 60_000) == 1_000
        assert modes.debounce_call(key, "d2", 1_000, 1_500, 60_000) <= 1_000
        assert modes.debounce_run(key, "d1") == "d2"
        assert modes.debounce_run(key, "d2") is None
