"""LockEngine on a real Redis Cluster (three primaries, a replica each): one key per lock,
one renewal call per node, SCAN per node, failover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import ClusterSet
from celery_redislock.engine import AcquireStatus, ClusterLockEngine, Lease, make_engine
from celery_redislock.engine.scripts import RENEW
from tests.harness import counting_cluster_client


@pytest.fixture
def client(cluster: ClusterSet) -> Iterator[RedisCluster]:
    client = make_client(cluster.url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


def keys_on_every_node(client: RedisCluster, count: int, prefix: str = "redislock:t") -> list[str]:
    keys = [f"{prefix}:{n}" for n in range(count)]
    nodes = {client.get_node_from_key(key).name for key in keys}
    assert len(nodes) == 3, "the keys must spread over the three primaries"
    return keys


def test_the_url_gives_a_cluster_client_and_engine(client: RedisCluster) -> None:
    assert isinstance(make_engine(client), ClusterLockEngine)
    assert len(client.get_primaries()) == 3


def test_acquire_release_transfer_on_every_node(client: RedisCluster) -> None:
    engine = make_engine(client)
    keys = keys_on_every_node(client, 30)
    for key in keys:
        assert engine.acquire(key, "me", 10_000).status is AcquireStatus.TAKEN
        assert engine.acquire(key, "other", 10_000).holder == "me"
        assert engine.transfer(key, "me", "next", 10_000)
        assert engine.holder_of(key) == "next"
        assert engine.release(key, "next", notify=f"{key}:released")
        assert client.exists(key) == 0


def test_release_notice_reaches_a_subscriber_on_another_node(client: RedisCluster) -> None:
    engine = make_engine(client)
    key = "redislock:t:notify"
    channel = f"{key}:released"
    pubsub = client.pubsub()  # as the "wait" strategy subscribes
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    engine.acquire(key, "me", 10_000)
    engine.release(key, "me", notify=channel)
    message = pubsub.get_message(timeout=5)
    pubsub.close()
    assert message is not None and message["data"] == key.encode()


def test_renewing_10000_locks_on_three_nodes_is_three_round_trips(cluster: ClusterSet) -> None:
    client, trips = counting_cluster_client(cluster.url)
    engine = make_engine(client)
    leases = [Lease(f"redislock:many:{n}", f"holder-{n}", 2_000) for n in range(10_000)]
    with client.pipeline() as pipe:
        for lease in leases:
            pipe.set(lease.key, lease.holder, px=2_000)
        pipe.execute()
    gone, stolen = leases[:10], leases[10:20]
    for lease in gone:
        client.delete(lease.key)
    for lease in stolen:
        client.set(lease.key, "intruder", px=60_000)
    nodes = {client.get_node_from_key(lease.key).name for lease in leases}
    assert len(nodes) == 3
    client.script_load(RENEW)  # on every primary: NOSCRIPT is not what is counted
    trips.reset()

    report = engine.renew_many([Lease(lease.key, lease.holder, 60_000) for lease in leases])

    assert trips.count == 3
    assert set(trips.by_node) == nodes and set(trips.by_node.values()) == {1}
    assert len(report.renewed) == 10_000 - 20
    assert sorted(lease.key for lease in report.retaken) == sorted(lease.key for lease in gone)
    assert sorted((lease.key, holder) for lease, holder in report.stolen) == sorted(
        (lease.key, "intruder") for lease in stolen
    )
    assert client.pttl(leases[500].key) > 50_000
    assert client.get(gone[0].key) == gone[0].holder.encode()
    assert client.get(stolen[0].key) == b"intruder"
    client.close()


def test_renewal_reloads_its_script_on_a_node_that_lost_it(cluster: ClusterSet, client: RedisCluster) -> None:
    engine = make_engine(client)
    keys = keys_on_every_node(client, 30)
    for key in keys:
        engine.acquire(key, "me", 10_000)
    for node in cluster.primaries():
        with node.client() as direct:
            direct.script_flush()
    report = engine.renew_many([Lease(key, "me", 20_000) for key in keys])
    assert len(report.renewed) == 30


def test_scan_inspect_and_delete_reach_every_primary(client: RedisCluster) -> None:
    engine = make_engine(client)
    keys = keys_on_every_node(client, 60)
    for key in keys:
        engine.acquire(key, f"holder-of-{key}", 30_000)
    client.set("other:key", "x")

    found = sorted(str(key, "utf-8") for key in engine.scan("redislock:t:*", 7))
    assert found == sorted(keys)
    infos = engine.inspect(keys)
    assert [info.holder for info in infos] == [f"holder-of-{key}" for key in keys]
    assert all(0 < info.ttl_ms <= 30_000 for info in infos)
    assert engine.inspect(["redislock:t:missing"])[0].holder is None

    assert engine.delete_many(keys, notify=lambda key: f"{key}:released") == [True] * 60
    assert list(engine.scan("redislock:t:*", 100)) == []
    assert client.get("other:key") == b"x"


def test_a_lock_survives_a_cluster_failover_and_renewal_follows_it(
    cluster: ClusterSet, client: RedisCluster
) -> None:
    engine = make_engine(client)
    keys = keys_on_every_node(client, 30, prefix="redislock:fo")
    for key in keys:
        engine.acquire(key, "me", 30_000)
    moved = keys[0]
    old_primary = cluster.node_for(moved)
    client.wait(1, 5_000, target_nodes=client.get_node_from_key(moved))  # replicated before the switch

    new_primary = cluster.failover(old_primary)

    assert cluster.node_for(moved).port == new_primary.port
    # The client's slot map still names the old primary: renewal learns the new map and renews.
    report = engine.renew_many([Lease(key, "me", 30_000) for key in keys])
    assert len(report.renewed) == 30 and not report.stolen
    assert engine.acquire(moved, "duplicate", 30_000).holder == "me"
    assert engine.release(moved, "me")
    with new_primary.client() as direct:
        assert direct.exists(moved) == 0


def test_a_cluster_url_with_a_database_is_refused() -> None:
    from celery_redislock.config.settings import read_settings
    from celery_redislock.errors import RedisURLError

    with pytest.raises(RedisURLError, match="only database 0"):
        read_settings({"redislock_url": "redis://node:7000/3?cluster=true"})


def test_redis_errors_from_an_unreachable_cluster_are_redis_errors() -> None:
    with pytest.raises(redis.RedisError):
        make_client("redis://127.0.0.1:1/0?cluster=true", socket_connect_timeout=0.5)


def test_semaphores_and_standalone_locks_on_a_cluster_renew_across_slots(client: RedisCluster) -> None:
    from celery_redislock import RedisLock, RedisSemaphore
    from celery_redislock.engine.renewal import get_renewer

    names = keys_on_every_node(client, 30, prefix="sem")
    semaphores = [RedisSemaphore(client, name, 2, timeout=30) for name in names[:15]]
    locks = [RedisLock(client, name, timeout=30) for name in names[15:]]
    for held in [*semaphores, *locks]:
        assert held.acquire()
    # Every semaphore's slot and every lock come back renewed: nothing fails with CROSSSLOT.
    report = get_renewer().renew_now()
    assert {lease.key for lease in report.renewed} >= set(names)
    assert not report.stolen and not report.retaken
    for held in [*semaphores, *locks]:
        assert held.owned()
        held.release()
    assert list(make_engine(client).scan("sem:*", 100)) == []


def test_the_states_of_semaphores_on_every_node_are_read_in_a_round_trip_per_node(
    cluster: ClusterSet,
) -> None:
    from celery_redislock import RedisSemaphore
    from celery_redislock.engine.scripts import SEM_STATE
    from celery_redislock.engine.semaphore_engine import make_semaphore_engine

    client, trips = counting_cluster_client(cluster.url)
    names = keys_on_every_node(client, 30, prefix="states")
    held = [RedisSemaphore(client, name, 2, timeout=30) for name in names[:20]]
    for semaphore in held:
        assert semaphore.acquire()
    client.set(names[29], "a plain lock")  # not a semaphore: None
    client.script_load(SEM_STATE)  # on every primary: NOSCRIPT is not what is counted
    trips.reset()

    states = make_semaphore_engine(client).states(names)

    assert trips.count == 3 and set(trips.by_node.values()) == {1}
    assert [len(state.holders) if state is not None else None for state in states] == [1] * 20 + [0] * 9 + [
        None
    ]
    for semaphore in held:
        semaphore.release()
    client.close()
