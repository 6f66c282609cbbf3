"""Lock URLs of every single-server form reach a real redis-server; ones that cannot are refused
when the client factory is made (worker start), not at the first task."""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_redislock.config.lock_client import LockClient, client_factory
from celery_redislock.config.settings import read_settings
from celery_redislock.contrib.testing import RedisServer


def lock_client_for(url: str) -> LockClient:
    settings = read_settings({"redislock_url": url})
    return client_factory(settings.url, settings.transport_options, socket_timeout=5)()


def test_a_unix_socket_url_reaches_the_server(tmp_path: Path) -> None:
    socket = tmp_path / "redis.sock"
    with RedisServer(extra_args=["--unixsocket", str(socket)]) as server:
        for url in (f"unix://{socket}?db=2", f"redis+socket://{socket}?virtual_host=2"):
            client = lock_client_for(url)
            client.set("from-the-lock-client", url)
            assert server.client(db=2).get("from-the-lock-client") == url.encode()
            client.close()


def test_cluster_false_is_a_single_server(redislock_server: RedisServer) -> None:
    client = lock_client_for(f"redis://127.0.0.1:{redislock_server.port}/3?cluster=false")
    assert client.ping()
    assert client.connection_pool.connection_kwargs["db"] == 3
    client.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:notaport/0", "Port could not be cast to integer value as 'notaport'"),
        ("redis://127.0.0.1:6379/locks", "the database 'locks' is not a number"),
        # redis-py quotes the name in '' or in ``, by version.
        ("redis://127.0.0.1:6379/0?socket_timeout=soon", "Invalid value for .socket_timeout."),
        ("sentinel://127.0.0.1:notaport/0", "Port could not be cast to integer value as 'notaport'"),
        ("sentinel://:pw@127.0.0.1:26379/zero", "the database 'zero' is not a number"),
    ],
)
def test_an_unusable_url_is_refused_before_connecting(url: str, problem: str) -> None:
    settings = read_settings({"redislock_url": url, "redislock_transport_options": {"master_name": "m"}})
    with pytest.raises(ValueError, match=problem) as caught:
        client_factory(settings.url, settings.transport_options)
    assert ":pw@" not in str(caught.value)
