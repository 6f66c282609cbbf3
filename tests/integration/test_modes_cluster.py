"""The dedup modes' scripts on a real Redis Cluster: each touches keys of one slot only (the lock
key and its ``{lock key}:…`` keys), so none fails with CROSSSLOT, on every node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet
from celery_redislock.engine.script_runner import ScriptRunner
from celery_redislock.modes import debounce, keep_latest, throttle
from celery_redislock.modes.keep_latest import LatestReply, latest_key


@pytest.fixture
def client(cluster: ClusterSet) -> Iterator[RedisCluster]:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


#: No delivery of these calls' messages holds a lock twice here.
DELIVERIES = "none-of-these@"


def latest(modes: ScriptRunner, key: str, holder: str, *, recheck: bool = False) -> LatestReply:
    """keep_latest for the call ``holder`` names (its task id is the holder's first letter)."""
    return keep_latest.step(
        modes, key, holder, 10_000, holder[0], 60_000, recheck=recheck, deliveries=DELIVERIES
    )


def keys_on_every_node(client: RedisCluster) -> list[str]:
    keys = [f"redislock:modes:{n}" for n in range(30)]
    assert len({client.get_node_from_key(key).name for key in keys}) == 3
    return keys


def test_throttle_keep_latest_and_debounce_scripts_on_every_node(client: RedisCluster) -> None:
    modes = ScriptRunner(client)
    for key in keys_on_every_node(client):
        # keep_latest: the first call takes the lock, the next is pending, a later one replaces it.
        assert latest(modes, key, "a@w:1").status == "run"
        assert latest(modes, key, "b@w:2").status == "pending"
        assert latest(modes, key, "c@w:3").status == "pending"
        replaced = latest(modes, key, "b@w:4", recheck=True)
        assert (replaced.status, replaced.other) == ("replaced", "c")
        # throttle: the run's end keeps its key for the rest of the window.
        assert throttle.end_window(modes, key, "a@w:1", "a@throttled", 5_000, "") == 2
        assert 0 < client.pttl(key) <= 5_000 and client.get(key) == b"a@throttled"
        client.delete(key)
        # debounce: the first call is delayed in full, the latest runs, earlier ones are superseded.
        assert debounce.debounce_call(modes, key, "d1", 1_000, 1_500, 60_000, 60_000)[0] == 1_000
        assert debounce.debounce_call(modes, key, "d2", 1_000, 1_500, 60_000, 60_000)[0] <= 1_000
        assert debounce.debounce_run(modes, key, "d1")[0] == "d2"
        assert debounce.debounce_run(modes, key, "d2")[0] is True
        assert client.exists(*debounce.debounce_keys(key)) == 0


def test_the_mode_scripts_with_hash_tagged_prefixes_on_every_node(client: RedisCluster) -> None:
    # A prefix with a tag keeps a tenant on one shard ({tenant1}): the mode keys must keep it
    # too, or keep_latest (the lock and its latest call in one script) fails with CROSSSLOT.
    keys = [f"{{tenant{n}}}:modes:{n:032x}" for n in range(30)]
    assert len({client.get_node_from_key(key).name for key in keys}) == 3
    modes = ScriptRunner(client)
    for key in keys:
        assert latest(modes, key, "a@w:1").status == "run"
        assert latest(modes, key, "b@w:2").status == "pending"
        assert client.get(latest_key(key)) == b"b"
        assert throttle.end_window(modes, key, "a@w:1", "a@throttled", 5_000, "") == 2
        assert debounce.debounce_call(modes, key, "d1", 1_000, 1_500, 60_000, 60_000)[0] == 1_000
        assert debounce.debounce_run(modes, key, "d1")[0] is True
