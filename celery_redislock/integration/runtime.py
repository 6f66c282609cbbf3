"""Per-app state of the Celery glue: settings read once, the engine, per-task plans."""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Callable

from celery import Celery
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..config.arguments import KeyBuilder
from ..config.lock_client import LockClient, client_factory
from ..config.options import LockOptions, option_names, source_task, validate
from ..config.settings import SETTING_DEFAULTS, AppSettings, read_settings
from ..engine import LeaseEngine, LockEngine, SemaphoreEngine, make_engine, make_semaphore_engine
from ..engine.counting import TaskTallies
from ..engine.decision_record import Record, Recorder
from ..engine.keys import release_channel
from ..engine.script_runner import ScriptRunner
from .mode import Plan, gates_for, mode_for

__all__ = [
    "SOCKET_TIMEOUT",
    "Plan",
    "Runtime",
    "app_layers_ask",
    "reset_runtime",
    "run_function",
    "runtime_for",
    "send_routes",
    "task_options",
]

# Bounds how long a task waits on a Redis that stopped answering; a lock's TTL covers the rest.
SOCKET_TIMEOUT = 5.0


def client_retry() -> Retry:
    """How the lock client retries a command that could not reach Redis: once, at once.

    Enough for a pooled connection that went stale when Redis restarted (the retry reconnects).
    Not redis-py's default (10 retries with backoff, seconds in all): a task must learn at once
    that Redis is down and apply ``on_redis_error``, and the renewal timer retries next interval.
    """
    return Retry(NoBackoff(), 1)


def run_function(task_class: type) -> Callable[..., Any]:
    """The task body with the signature callers use (``self`` dropped for ``bind=True``)."""
    run = inspect.getattr_static(task_class, "run")
    if isinstance(run, staticmethod):
        return run.__func__
    # A method (bind=True, or a subclass defining run): its first parameter is the task.
    return functools.partial(run, None)


def app_layers_ask(app: Celery, option: str, wanted: Callable[[Any], bool]) -> bool:
    """Whether ``redislock_options`` or any ``redislock_queues`` layer sets ``option`` to a value
    ``wanted`` accepts: read without resolving, to tell whether a send needs the plan at all."""
    conf = app.conf
    layers = [conf.get("redislock_options"), *(conf.get("redislock_queues") or {}).values()]
    return any(isinstance(layer, Mapping) and option in layer and wanted(layer[option]) for layer in layers)


def task_options(task_class: type) -> dict[str, Any]:
    """The options set on a task class (decorator keywords are class attributes), validated."""
    given = {name: getattr(task_class, name, None) for name in option_names()}
    name = getattr(task_class, "name", None) or task_class.__name__
    return validate({k: v for k, v in given.items() if v is not None}, source_task(name))


class Runtime:
    """One per Celery app: reads and validates the ``redislock_*`` settings once."""

    def __init__(self, app: Celery) -> None:
        conf = app.conf
        # Reading a key loads a pending config_from_object module, so `in` below sees it.
        self.settings: AppSettings = read_settings(conf)
        # add_defaults puts its mapping above such a module's settings (Celery keeps the
        # module among its defaults): add only the settings it does not give.
        conf.add_defaults({name: value for name, value in SETTING_DEFAULTS.items() if name not in conf})
        # Weakly: the per-app cache is keyed weakly on the app, so a runtime holding it would
        # keep a dropped app, its runtime and its Redis client alive for good.
        self._app = weakref.ref(app)
        # One Redis, the master of a Sentinel set, or a Redis Cluster, by the URL's form. The
        # URL is checked now; the client is made on first use (a cluster client connects).
        self._connect = client_factory(
            self.settings.url,
            self.settings.transport_options,
            self.settings.ssl_options,
            socket_connect_timeout=SOCKET_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            health_check_interval=30,
            retry=client_retry(),
        )
        self._engine: LockEngine | None = None
        self._background: LockClient | None = None
        explain_ttl = self.settings.explain_ttl
        #: How this app records its calls' decisions (``explain`` reads them); None: it does not.
        self.recorder: Recorder | None = None
        if explain_ttl is not None:
            cluster = self.settings.topology == "cluster"
            self.recorder = Recorder(self.settings.key_prefix, explain_ttl, cluster=cluster)
        self._plans: dict[tuple[str, str | None], Plan] = {}
        # Task name -> whether some execution of it may wait for its key (see waited_on).
        self._waited_on: dict[str, bool] = {}
        self._mutex = threading.Lock()

    @property
    def app(self) -> Celery:
        """The app whose settings these are (alive as long as anything can reach its runtime)."""
        app = self._app()
        if app is None:
            raise ReferenceError("the Celery app of this celery_redislock runtime was garbage-collected")
        return app

    @property
    def engine(self) -> LockEngine:
        """The app's lock engine, made on first use: a cluster client connects as it is made,
        and an unreachable Redis must be a RedisError where a lock is taken, not at start."""
        engine = self._engine
        if engine is None:
            with self._mutex:
                if self._engine is None:
                    self._engine = make_engine(self._connect(), hold_connection=True)
                engine = self._engine
        return engine

    @engine.setter
    def engine(self, engine: LockEngine) -> None:
        # Tests and benchmarks put in an engine on a client of their own (one that counts).
        self._engine = engine

    @property
    def background_client(self) -> LockClient:
        """A client of the lock Redis on connections of its own, made on first use: what a
        worker's background readers use (the holds' refresh, ``gates.hold_watch``), so that they
        never take, nor wait for, the connection the calls' locks are taken on."""
        client = self._background
        if client is None:
            with self._mutex:
                if self._background is None:
                    self._background = self._connect()
                client = self._background
        return client

    @background_client.setter
    def background_client(self, client: LockClient) -> None:
        # Benchmarks put in a client whose replies are canned.
        self._background = client

    def plan(self, task: Any, queue: str | None) -> Plan:
        """Options, key builder and mode for ``task`` consumed from ``queue`` (cached)."""
        cache_key = (task.name, queue if queue in self.settings.queues else None)
        plan = self._plans.get(cache_key)
        if plan is None:
            options = self.settings.options_for(task.name, task_options(type(task)), cache_key[1])
            lock_key = options.lock_key
            builder = KeyBuilder(self.settings.key_prefix, task.name, run_function(type(task)), lock_key)
            mode, gates = mode_for(options), gates_for(options)
            plan = Plan(options, builder, mode, gates, TaskTallies(task.name), options.lock)
            for gate in plan.gates:  # what only the app shows (a limit name no setting declares)
                check = getattr(gate, "check_plan", None)
                if check is not None:
                    check(self, task, options)
            with self._mutex:
                self._plans[cache_key] = plan
                if task.name not in self._waited_on:
                    self._waited_on[task.name] = self._may_wait(task)
        return plan

    def _may_wait(self, task: Any) -> bool:
        # The values as given, not resolved: a queue layer that clashes with the task's options
        # is an error only where the task is consumed from that queue, never here.
        own = getattr(type(task), "on_duplicate", None)
        if own is not None:
            return bool(own == "wait")
        layers = [self.settings.options, *self.settings.queues.values()]
        return any(layer.get("on_duplicate") == "wait" for layer in layers)

    def waited_on(self, task_name: str) -> bool:
        """Whether an execution of ``task_name`` may wait for its key: ``on_duplicate="wait"``
        in the task's options, ``redislock_options`` or a ``redislock_queues`` layer. Only then
        does a release PUBLISH its notice (3 to 4 µs of the lock Redis's time per task, measured
        in docs/benchmarks.md); a task never planned here is assumed waited on."""
        return self._waited_on.get(task_name, True)

    @functools.cached_property
    def semaphores(self) -> SemaphoreEngine:
        """The engine of tasks with ``max_concurrency`` > 1, on the same client."""
        return make_semaphore_engine(self.engine.client)

    @property
    def scripts(self) -> ScriptRunner:
        """Runs the modes' own scripts: the lock engine's runner (its client, its connection)."""
        return self.engine.runner

    def engine_for(self, options: LockOptions) -> LeaseEngine:
        """Where a task with ``options`` holds its key: a lock, or a semaphore's slot."""
        return self.semaphores if options.max_concurrency > 1 else self.engine

    def noted(self, task_id: str, kind: str, *fields: str) -> Record | None:
        """What a decision on ``task_id`` keeps in the call's record: a ``kind`` entry with
        ``fields`` (None: this app keeps no record)."""
        recorder = self.recorder
        return None if recorder is None else recorder.record(task_id, kind, *fields)

    def release_channel(self, key: str) -> str:
        """Where a release of ``key`` is published, for executions waiting on it."""
        return release_channel(key)


_runtimes: weakref.WeakKeyDictionary[Celery, Runtime] = weakref.WeakKeyDictionary()
_runtimes_lock = threading.Lock()
#: The runtime ``runtime_for`` gave last (its app's: see there); weak, so a dropped app's
#: runtime and its client are freed with it.
_latest: weakref.ref[Runtime] | None = None


#: Per app: task name -> how its ``apply_async`` sends (``SingletonTask._send_route``), read
#: from the settings once, as a runtime reads them. Apart from the runtime: sending a task that
#: locks at execution reads no lock settings, so a bad lock URL never stops a sender.
_send_routes: weakref.WeakKeyDictionary[Celery, dict[str, str]] = weakref.WeakKeyDictionary()


def send_routes(app: Celery) -> dict[str, str]:
    """The app's cache of send routes by task name (filled by ``SingletonTask``)."""
    routes = _send_routes.get(app)
    if routes is None:
        with _runtimes_lock:
            routes = _send_routes.setdefault(app, {})
    return routes


def runtime_for(app: Celery) -> Runtime:
    """The app's runtime, created (settings read and validated) on first use."""
    global _latest
    latest = _latest() if _latest is not None else None
    # The last app's runtime first: a worker has one app, and the weak dictionary's lookup
    # makes a weak reference of the app every call, every task.
    if latest is not None and latest._app() is app:
        return latest
    with _runtimes_lock:  # noted under the lock: a reset meanwhile is never undone
        runtime = _runtimes.get(app)
        if runtime is None:
            runtime = _runtimes[app] = Runtime(app)
        _latest = weakref.ref(runtime)
    return runtime


def reset_runtime(app: Celery) -> None:
    """Forget the app's runtime, so changed settings are read again (tests, reconfiguration)."""
    global _latest
    with _runtimes_lock:
        _runtimes.pop(app, None)
        _send_routes.pop(app, None)
        _latest = None
