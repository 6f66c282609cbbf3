"""The lock client on a real Sentinel set-up (a master, a replica, three Sentinels)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_redislock.config.lock_client import make_client
from celery_redislock.config.settings import read_settings
from celery_redislock.contrib.testing import SentinelSet
from celery_redislock.engine import AcquireStatus, Lease, LockEngine, make_engine


@pytest.fixture
def engine(sentinels: SentinelSet) -> Iterator[LockEngine]:
    client = make_client(sentinels.url, sentinels.transport_options, socket_timeout=5)
    yield make_engine(client)
    client.close()


def test_a_broker_style_sentinel_url_reaches_the_master(sentinels: SentinelSet, engine: LockEngine) -> None:
    assert engine.acquire("redislock:s:1", "me", 10_000).status is AcquireStatus.TAKEN
    with sentinels.master().client() as master:
        assert master.get("redislock:s:1") == b"me"
        master.wait(1, 5_000)
    with sentinels.replica().client() as replica:
        assert replica.get("redislock:s:1") == b"me"  # replicated, so a failover keeps it
    assert engine.release("redislock:s:1", "me")


def test_renewal_retakes_a_lock_the_master_lost(sentinels: SentinelSet, engine: LockEngine) -> None:
    engine.acquire("redislock:s:2", "me", 10_000)
    with sentinels.master().client() as master:
        master.delete("redislock:s:2")  # as a failover to a replica that never got it would
        report = engine.renew_many([Lease("redislock:s:2", "me", 10_000)])
        assert [lease.key for lease in report.retaken] == ["redislock:s:2"]
        assert master.get("redislock:s:2") == b"me"


def test_the_lock_settings_follow_a_sentinel_broker(sentinels: SentinelSet) -> None:
    conf = {
        "broker_url": sentinels.url,
        "broker_transport_options": {**sentinels.transport_options, "visibility_timeout": 3600},
    }
    settings = read_settings(conf)
    assert settings.url == sentinels.url and settings.topology == "sentinel"
    assert dict(settings.transport_options) == sentinels.transport_options
    client = make_client(settings.url, settings.transport_options)
    try:
        assert client.set("redislock:s:3", "x")
        with sentinels.master().client() as master:
            assert master.get("redislock:s:3") == b"x"
    finally:
        client.close()


def test_sentinel_passwords_and_db_go_where_kombu_sends_them(sentinels: SentinelSet) -> None:
    # The first URL's password and database are the master's; sentinel_kwargs the Sentinels'.
    client = make_client(
        sentinels.url.replace("sentinel://", "sentinel://:master-pw@", 1).replace("/0", "/3", 1),
        {**sentinels.transport_options, "sentinel_kwargs": {"password": "sentinel-pw"}},
        socket_timeout=2,
    )
    pool = client.connection_pool
    assert pool.connection_kwargs["password"] == "master-pw"
    assert pool.connection_kwargs["db"] == 3
    sentinel_kwargs = pool.sentinel_manager.sentinel_kwargs
    assert sentinel_kwargs == {"socket_timeout": 2, "password": "sentinel-pw"}
    client.close()


def test_the_engine_follows_a_failover_to_the_new_master(sentinels: SentinelSet) -> None:
    # A held connection (a Celery app's engine) found the old master demoted: its reconnect
    # must ask the Sentinels again, as the pool's connect does, not go back to the old address.
    # Both kinds of engine through one failover: a second one would wait for the Sentinels'
    # next look at the old master.
    clients = {hold: make_client(sentinels.url, sentinels.transport_options) for hold in (False, True)}
    try:
        engines = {hold: make_engine(client, hold_connection=hold) for hold, client in clients.items()}
        for hold, engine in engines.items():
            assert engine.take(f"redislock:f:{hold}:1", "me", 10_000)
        _, new = sentinels.failover()
        for hold, engine in engines.items():
            assert engine.take(f"redislock:f:{hold}:2", "me", 10_000), f"hold_connection={hold}"
        with next(s for s in sentinels.servers if s.port == new).client() as master:
            assert master.mget("redislock:f:False:2", "redislock:f:True:2") == [b"me", b"me"]
    finally:
        for client in clients.values():
            client.close()
