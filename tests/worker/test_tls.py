"""SingletonTasks on a TLS Redis through a real worker: the lock client inherits the result
backend's ``redis_backend_use_ssl``; a CA that does not fit fails the task at once, naming the
setting, instead of re-queueing it for ever."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import RedisTLSError, SingletonTask
from tests.harness import TestCA, TLSRedisServer

from .conftest import lock_keys


def tls_app(make_app: Callable[..., Celery], server: TLSRedisServer, **conf: Any) -> Celery:
    """An app whose broker is not Redis (so the lock URL is the result backend's) and whose
    results are on the TLS port, as managed Redis with in-transit encryption is configured."""
    settings: dict[str, Any] = {
        "broker_url": "memory://",
        "result_backend": server.tls_url.replace("/0", "/1"),
        # Celery's result backend wants ssl_cert_reqs given; Celery's spelling.
        "redis_backend_use_ssl": {"ssl_ca_certs": str(server.tls.ca_certs), "ssl_cert_reqs": "CERT_REQUIRED"},
        "redislock_url": None,
    }
    return make_app(**{**settings, **conf})


def test_a_singleton_task_runs_on_a_tls_result_backend(
    make_app: Callable[..., Celery],
    worker: Callable[..., Any],
    tls_server: TLSRedisServer,
    tls_redis: redis.Redis,
) -> None:
    app = tls_app(make_app, tls_server)
    locks = tls_server.client(db=1)

    @app.task(base=SingletonTask, shared=False, name="tls.report")
    def report(n: int) -> list[bytes]:
        return lock_keys(locks)  # seen from inside the body: the lock is held on the TLS Redis

    with worker(app, concurrency=2):
        held = report.delay(1).get(timeout=30)
    assert len(held) == 1
    assert held[0].startswith(b"redislock:tls.report")
    assert lock_keys(locks) == []  # released after the run
    locks.close()


def test_a_wrong_ca_fails_the_task_naming_the_setting(
    make_app: Callable[..., Celery],
    worker: Callable[..., Any],
    tls_server: TLSRedisServer,
    tls_redis: redis.Redis,
    other_ca: TestCA,
) -> None:
    # Results on the TLS Redis with the right CA; the locks on it with one that did not sign it.
    app = tls_app(
        make_app,
        tls_server,
        redislock_url=tls_server.tls_url,
        redislock_use_ssl={"ssl_ca_certs": str(other_ca.ca_certs), "ssl_cert_reqs": ssl.CERT_REQUIRED},
    )

    @app.task(base=SingletonTask, shared=False, name="tls.wrong_ca")
    def wrong_ca() -> str:
        return "ran"

    with worker(app, concurrency=2):
        result = wrong_ca.delay()
        # The default on_redis_error="retry" would re-queue it for ever: it fails instead.
        with pytest.raises(RedisTLSError) as caught:
            result.get(timeout=30)
    assert "come from redislock_use_ssl" in str(caught.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert result.state == "FAILURE"


def test_a_wrong_ca_refuses_a_send_locked_at_enqueue(
    make_app: Callable[..., Celery], tls_server: TLSRedisServer, tls_redis: redis.Redis, other_ca: TestCA
) -> None:
    app = tls_app(
        make_app,
        tls_server,
        redislock_url=tls_server.tls_url,
        redislock_use_ssl={"ssl_ca_certs": str(other_ca.ca_certs)},
    )

    @app.task(base=SingletonTask, shared=False, name="tls.at_enqueue", lock_on="enqueue")
    def at_enqueue() -> None: ...

    # Sent anyway (as for an unreachable Redis), it would hide the error in the worker's retries.
    with pytest.raises(RedisTLSError, match="come from redislock_use_ssl"):
        at_enqueue.delay()
