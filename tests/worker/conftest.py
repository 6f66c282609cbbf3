"""Real Celery workers for the tests: in-process (celery.contrib.testing) and prefork subprocesses.

Each test gets its own app (tasks registered with ``shared=False``, so no other app in the
process sees them) on the session's real redis-server: broker db 0, results db 1, locks db 2.
With ``--broker=rabbitmq`` (``REDISLOCK_BROKER=rabbitmq``) the broker is a vhost of its own on
the session's RabbitMQ instead.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import state
from kombu.asynchronous import set_event_loop

from celery_redislock import DuplicateTaskError, OptionError, SingletonTask
from celery_redislock.config.lock_client import make_client
from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.integration.runtime import reset_runtime
from tests.harness import RabbitMQServer

if TYPE_CHECKING:
    from .mode_harness import Deployment, Store

_names = itertools.count()

#: A test of redelivery after the visibility timeout: a Redis (and SQS) transport's, which
#: RabbitMQ does not have (it redelivers an unacknowledged message when its channel closes).
visibility_redelivery = pytest.mark.redis_broker(
    "redelivery of an unacknowledged message after the Redis transport's visibility_timeout"
)

#: Seconds a message may stay unacknowledged before the Redis transport gives it out again.
VISIBILITY_TIMEOUT = 1


def restore_visible(app: Celery) -> None:
    """Give out again every message unacknowledged for longer than the visibility timeout: what
    kombu's Redis transport does in every consumer, every ``unacked_restore_interval``."""
    with app.connection_for_write() as conn:
        conn.default_channel.qos.restore_visible(num=100, interval=1)


def wait_redelivered(client: Celery, proc: WorkerProcess, message: str) -> None:
    """Give out unacknowledged messages again until ``message`` is in ``proc``'s log: polled,
    as a message becomes visible again once it has been unacknowledged long enough."""

    def redelivered() -> bool:
        restore_visible(client)
        return message in proc.log()

    assert poll(redelivered, 20, interval=0.2), proc.log()


def lock_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter("redislock:*"))


# The head of every worker module a prefork test writes: the app on the test's databases, and
# `hold`, which tells the test a body started ("<pid> <task id>" on started:<tag>, db 3) and
# blocks until the test opens gate:<tag>.
WORKER_PREAMBLE = """
import os

import redis
from celery import Celery

from celery_redislock import OptionError, SingletonTask

app = Celery({name!r})
app.conf.update(
    broker_url={broker!r},
    result_backend={backend!r},
    redislock_url={locks!r},
    broker_connection_retry_on_startup=False,
    task_default_queue="celery",
    result_expires=None,
)
app.conf.update({broker_conf})
# No socket timeout (redis-py defaults to 5 s): BLPOP below blocks until the test opens the gate.
coord = redis.Redis.from_url({coord!r}, socket_timeout=None)


def hold(task, tag):
    coord.rpush("started:" + tag, f"{{os.getpid()}} {{task.request.id}}")
    if coord.blpop("gate:" + tag, timeout=60) is None:
        raise RuntimeError("the test never opened gate:" + tag)
    return "done " + tag
"""


def worker_module(urls: dict[str, str], name: str, tasks: str) -> str:
    """Source of a worker module: the preamble for app ``name``, then ``tasks``."""
    return WORKER_PREAMBLE.format(name=name, **{"broker_conf": "{}", **urls}) + textwrap.dedent(tasks)


#: Celery's recommended RabbitMQ set-up (``--broker rabbitmq-quorum``): quorum queues, a topic
#: exchange (native delayed delivery refuses a direct one), publisher confirms. Celery 5.5 and
#: later send every countdown through RabbitMQ's native delayed delivery then.
QUORUM: dict[str, Any] = {
    "task_default_queue_type": "quorum",
    "task_default_exchange_type": "topic",
    "broker_transport_options": {"confirm_publish": True},
}


def broker_conf(config: pytest.Config) -> dict[str, Any]:
    """The app settings the test run's broker asks for (``QUORUM`` with ``rabbitmq-quorum``)."""
    return dict(QUORUM) if config.getoption("broker") == "rabbitmq-quorum" else {}


@pytest.fixture
def coord(redislock_server: RedisServer, urls: dict[str, str]) -> Iterator[redis.Redis]:
    """The coordination database (db 3) task bodies and the test talk through."""
    client = redislock_server.client(db=3)
    yield client
    client.close()


def wait_started(
    coord: redis.Redis, tag: str, count: int = 1, timeout: float = 15.0
) -> list[tuple[int, str]]:
    """``(pid, task id)`` of the first ``count`` executions of ``tag`` to start."""
    started = poll(lambda: len(coord.lrange(f"started:{tag}", 0, -1)) >= count, timeout)
    assert started, f"{count} execution(s) of {tag!r} did not start within {timeout}s"
    entries = [entry.decode().split() for entry in coord.lrange(f"started:{tag}", 0, -1)]
    return [(int(pid), task_id) for pid, task_id in entries]


def outcome(result: Any, proc: WorkerProcess, timeout: float = 30.0) -> Any:
    """``result.get(timeout)``; on a timeout, a failure that carries the call's state and the
    worker's log tail (a loaded CI run's only clue to where the call went)."""
    from celery.exceptions import TimeoutError as ResultTimeout

    try:
        return result.get(timeout=timeout)
    except ResultTimeout:
        pytest.fail(
            f"{result.id} was not ready within {timeout}s ({result.state}); worker log:\n{proc.log()[-4000:]}"
        )


def skip_duplicates(client: Celery, task: str, tag: str, count: int) -> None:
    """Send ``count`` calls of ``task(tag)`` while ``tag``'s holder runs: each is skipped (by
    another child of a prefork worker, the holder's being busy)."""
    for _ in range(count):
        error = client.send_task(task, args=[tag]).get(timeout=15, propagate=False)
        assert isinstance(error, DuplicateTaskError), error


def stats_of(app: Celery, node: str) -> dict[str, Any] | None:
    """The ``redislock_stats`` reply of ``node``, or None if it did not answer."""
    # Celery's Inspect has no generic attribute access (inspect().redislock_stats() does not
    # exist): a command of a plugin is sent with broadcast(), as `celery inspect` does.
    replies = app.control.broadcast("redislock_stats", reply=True, timeout=5, destination=[node])
    for reply in replies or []:
        if node in reply:
            answer: dict[str, Any] = reply[node]
            return answer
    return None


def queued_count(app: Celery, queue: str = "celery") -> int:
    """How many messages wait in ``queue`` of ``app``'s broker (Redis or RabbitMQ)."""
    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_declare(queue, passive=True).message_count)


def take_messages(app: Celery, queue: str) -> list[Any]:
    """Every message waiting in ``queue`` of ``app``'s broker, taken out of it (any broker):
    each has the Celery message's ``headers``."""
    taken: list[Any] = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            taken.append(message)
    return taken


def open_gate(coord: redis.Redis, tag: str, times: int = 2) -> None:
    coord.rpush(f"gate:{tag}", *["go"] * times)


@pytest.fixture
def broker_url(request: pytest.FixtureRequest, redislock_server: RedisServer) -> Iterator[str]:
    """The test's broker: db 0 of the session's redis-server, or with ``--broker=rabbitmq`` a
    vhost of its own on the session's RabbitMQ, dropped after the test."""
    if request.config.getoption("broker") == "redis":
        yield f"redis://127.0.0.1:{redislock_server.port}/0"
        return
    yield from _vhost(request.getfixturevalue("rabbitmq_server"))


@pytest.fixture
def rabbitmq_url(rabbitmq_server: RabbitMQServer) -> Iterator[str]:
    """A vhost of its own on the session's RabbitMQ, whatever ``--broker`` says."""
    yield from _vhost(rabbitmq_server)


def _vhost(server: RabbitMQServer) -> Iterator[str]:
    name = f"test{next(_names)}"
    yield server.add_vhost(name)
    server.delete_vhost(name)


@pytest.fixture
def urls(
    request: pytest.FixtureRequest, redislock_server: RedisServer, redislock_url: str, broker_url: str
) -> dict[str, str]:
    base = f"redis://127.0.0.1:{redislock_server.port}"
    return {
        "broker": broker_url,
        "backend": f"{base}/1",
        "locks": f"{base}/2",
        "coord": f"{base}/3",
        # The worker modules' settings of the broker (WORKER_PREAMBLE).
        "broker_conf": repr(broker_conf(request.config)),
    }


@pytest.fixture
def lock_server() -> Iterator[RedisServer]:
    """A lock Redis of its own, which a test stops or restarts while the broker stays up."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def locks(redislock_server: RedisServer, urls: dict[str, str]) -> Iterator[redis.Redis]:
    """A client to the lock database."""
    client = redislock_server.client(db=2)
    yield client
    client.close()


@pytest.fixture
def make_app(request: pytest.FixtureRequest, urls: dict[str, str]) -> Iterator[Callable[..., Celery]]:
    apps: list[Celery] = []
    own = broker_conf(request.config)

    def make(**conf: Any) -> Celery:
        app = Celery(f"redislock_test_{next(_names)}", set_as_current=False)
        app.conf.update(
            broker_url=urls["broker"],
            result_backend=urls["backend"],
            redislock_url=urls["locks"],
            broker_connection_retry_on_startup=False,
            worker_hijack_root_logger=False,
            task_default_queue="celery",
            result_expires=None,
        )
        app.conf.update({**own, **conf})
        apps.append(app)
        return app

    yield make
    for app in apps:
        _forget_results(app)
        reset_runtime(app)
        app.close()


def _forget_results(app: Celery) -> None:
    """Close the app's result subscriptions now, while its server is up: an AsyncResult the
    garbage collector frees later (after a test stopped that server, or at the end of the
    session) would otherwise unsubscribe in its ``__del__``, retry to reconnect for seconds,
    and raise where nobody can catch it."""
    consumer = getattr(app.backend, "result_consumer", None)  # the Redis backend's pub/sub
    if consumer is not None:
        consumer.subscribed_to.clear()  # so a later __del__ has nothing to unsubscribe
        consumer.stop()


@pytest.fixture
def worker() -> Callable[..., Any]:
    """``with worker(app, pool="threads", concurrency=4, queues=...)``: an in-process worker."""

    @contextmanager
    def run(
        app: Celery, pool: str = "threads", concurrency: int = 4, queues: list[str] | None = None
    ) -> Iterator[Any]:
        kwargs: dict[str, Any] = {}
        if queues:
            kwargs["queues"] = queues
        # A hub of its own, on this worker's timer, as a worker process has: kombu keeps the
        # event loop process-wide, and Celery < 5.6 reused the last worker's, whose timer no
        # longer runs (a countdown retry was received and never run).
        set_event_loop(None)
        with start_worker(
            app,
            pool=pool,
            concurrency=concurrency,
            perform_ping_check=False,
            loglevel="INFO",
            shutdown_timeout=10,
            **kwargs,
        ) as w:
            try:
                yield w
            finally:
                _wake_to_stop(w)

    return run


def _wake_to_stop(w: Any) -> None:
    """Ask an in-process worker to stop, and wake its event loop to see it: on RabbitMQ (no
    polling transport) the loop may otherwise sleep up to 10 s in its poll."""
    state.should_terminate = 0  # what start_worker sets on exit; its loop checks it when awake
    hub = getattr(w, "hub", None)
    if hub is not None:
        hub.call_soon(lambda: None)


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """``worker_process(source, "-c", "2", pool="prefork")``: writes ``source`` as a module,
    starts a worker subprocess on it with that pool (prefork, threads, solo or gevent)."""
    started: list[WorkerProcess] = []

    def start(source: str, *args: str, pool: str = "prefork") -> WorkerProcess:
        module = f"wapp{next(_names)}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        proc = WorkerProcess(tmp_path, module, ["-P", pool, *args])
        started.append(proc)
        proc.wait_ready()
        return proc

    yield start
    # Killed, not stopped: nothing is asserted after the test, and a killed worker writes nothing
    # into the next test's databases (tests of a warm shutdown call proc.stop() themselves).
    for proc in started:
        proc.kill()


@pytest.fixture
def deployment(
    urls: dict[str, str],
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> Deployment:
    """The test's servers, its apps and its worker subprocesses, as one (see ``Deployment``)."""
    from .mode_harness import Deployment  # which imports this module's worker_module

    return Deployment(urls, make_app, worker_process)


@pytest.fixture
def store(request: pytest.FixtureRequest, deployment: Deployment, locks: redis.Redis) -> Iterator[Store]:
    """Where a rate-limit test's limits live: the test's redis-server, or a Redis Cluster (every
    named limit under one hash tag: one node decides them) when the test's ``kind`` parameter
    is "cluster"."""
    from .mode_harness import Store

    kind = request.node.callspec.params.get("kind", "single")
    if kind != "cluster":
        yield Store(deployment, locks)
        return
    url = request.getfixturevalue("cluster").url
    client = make_client(url)
    yield Store(deployment.with_locks(url), client)
    client.close()


def registration_error(app: Celery, name: str, **options: Any) -> OptionError:
    """The OptionError that registering a SingletonTask ``name`` with ``options`` raises."""
    with pytest.raises(OptionError) as caught:

        @app.task(base=SingletonTask, shared=False, name=name, **options)
        def bad() -> None: ...

        assert bad.name  # a shared=False task is bound (and checked) when first used

    return caught.value
