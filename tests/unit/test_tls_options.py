"""The lock client's SSL options: where they come from, Celery's spellings of ssl_cert_reqs,
and the errors for ones that cannot be used (no server: the TLS connections themselves are
tested in tests/integration/test_tls.py)."""

from __future__ import annotations

import re
import ssl
from typing import Any

import pytest
import redis

from celery_redislock import OptionError
from celery_redislock.config.lock_client import client_factory, tls_failure
from celery_redislock.config.settings import read_settings, validate_ssl_options

CA = {"ssl_ca_certs": "/etc/ca.pem"}


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("CERT_REQUIRED", ssl.CERT_REQUIRED),
        ("CERT_OPTIONAL", ssl.CERT_OPTIONAL),
        ("CERT_NONE", ssl.CERT_NONE),
        ("required", ssl.CERT_REQUIRED),
        ("optional", ssl.CERT_OPTIONAL),
        ("none", ssl.CERT_NONE),
        (ssl.CERT_REQUIRED, ssl.CERT_REQUIRED),
        (ssl.CERT_NONE, ssl.CERT_NONE),
    ],
)
def test_every_spelling_of_ssl_cert_reqs(given: Any, meant: ssl.VerifyMode) -> None:
    assert validate_ssl_options({"ssl_cert_reqs": given}, "broker_use_ssl") == {"ssl_cert_reqs": meant}


@pytest.mark.parametrize("value", [None, False, {}])
def test_no_ssl_options(value: Any) -> None:
    assert validate_ssl_options(value, "redislock_use_ssl") is None


def test_true_is_tls_with_redis_py_defaults() -> None:
    assert validate_ssl_options(True, "redislock_use_ssl") == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            {"ssl_cert_reqs": "CERT_MAYBE"},
            "redis_backend_use_ssl: option 'ssl_cert_reqs' must be one of CERT_REQUIRED",
        ),
        ({"ssl_cert_reqs": True}, "option 'ssl_cert_reqs' must be one of"),
        (
            {"ca_certs": "/ca.pem"},
            "option 'ca_certs' is not an SSL option of redis-py (did you mean 'ssl_ca_certs'?)",
        ),
        ("/ca.pem", "option 'redis_backend_use_ssl' must be a dict of redis-py's ssl_* connection arguments"),
    ],
)
def test_bad_ssl_options_name_the_setting(value: Any, problem: str) -> None:
    with pytest.raises(OptionError) as caught:
        validate_ssl_options(value, "redis_backend_use_ssl")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("conf", "source", "options"),
    [
        ({"broker_url": "rediss://b/0", "broker_use_ssl": CA}, "broker_use_ssl", CA),
        (
            {
                "broker_url": "amqp://",
                "broker_use_ssl": {"x": 1},
                "result_backend": "rediss://r/1",
                "redis_backend_use_ssl": CA,
            },
            "redis_backend_use_ssl",
            CA,
        ),
        (
            {"redislock_url": "rediss://l/2", "broker_url": "rediss://b/0", "broker_use_ssl": CA},
            "redislock_use_ssl",
            None,
        ),
        (
            {"broker_url": "rediss://b/0", "broker_use_ssl": CA, "redislock_use_ssl": False},
            "redislock_use_ssl",
            None,
        ),
        (
            {"broker_url": "rediss://b/0", "broker_use_ssl": CA, "redislock_use_ssl": True},
            "redislock_use_ssl",
            {},
        ),
        # A socket has no TLS: the broker's options are for its TCP URLs.
        ({"broker_url": "redis+socket:///tmp/r.sock", "broker_use_ssl": CA}, "broker_use_ssl", None),
    ],
)
def test_where_the_ssl_options_come_from(conf: dict[str, Any], source: str, options: Any) -> None:
    settings = read_settings(conf)
    assert settings.ssl_source == source
    assert (None if settings.ssl_options is None else dict(settings.ssl_options)) == options
    assert "/etc/ca.pem" not in repr(settings)  # option names only, as for transport options


def test_own_ssl_options_on_a_socket_url_are_refused() -> None:
    with pytest.raises(OptionError, match=r"redislock_use_ssl.*is a unix socket"):
        read_settings({"redislock_url": "unix:///tmp/r.sock", "redislock_use_ssl": CA})


@pytest.mark.parametrize(
    ("given", "sent"), [("CERT_OPTIONAL", "optional"), ("CERT_NONE", "none"), ("required", "required")]
)
def test_ssl_cert_reqs_in_a_url_reaches_redis_py_in_its_spelling(given: str, sent: str) -> None:
    client = client_factory(f"rediss://:pw@127.0.0.1:6380/0?ssl_cert_reqs={given}")()
    assert isinstance(client, redis.Redis)
    assert client.connection_pool.connection_kwargs["ssl_cert_reqs"] == sent
    assert client.connection_pool.connection_class is redis.SSLConnection


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("rediss://:pw@h:6380/0?ssl_cert_reqs=CERT_MAYBE", "ssl_cert_reqs must be one of CERT_REQUIRED"),
        ("redis://:pw@h:6379/0?ssl_ca_certs=/ca.pem", "ssl_* parameters need a rediss:// URL"),
    ],
)
def test_unusable_ssl_parameters_in_a_url_are_refused_before_connecting(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        client_factory(url)
    assert ":pw@" not in str(caught.value) and "h:63" in str(caught.value)


def test_ssl_options_make_a_redis_url_tls_as_celery_does() -> None:
    client = client_factory("redis://127.0.0.1:6380/0", None, {"ssl_cert_reqs": ssl.CERT_NONE})()
    assert isinstance(client, redis.Redis)
    assert client.connection_pool.connection_class is redis.SSLConnection


def _raised_in(outer: type[Exception], inner: BaseException) -> BaseException:  # type: ignore[return]
    # As redis-py raises it: inside the handler of the socket's error (so it is the context).
    try:
        try:
            raise inner
        except BaseException:
            raise outer("Error connecting")  # noqa: B904
    except BaseException as exc:
        return exc


def test_tls_failure_finds_a_set_up_error_not_an_outage() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert tls_failure(_raised_in(redis.ConnectionError, verify)) is verify
    missing = FileNotFoundError(2, "No such file or directory")
    assert tls_failure(_raised_in(redis.ConnectionError, missing)) is missing
    for outage in (
        ssl.SSLEOFError(8, "EOF occurred"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError(),
    ):
        assert tls_failure(_raised_in(redis.ConnectionError, outage)) is None
