"""The harness of the mode worker tests (throttle, debounce, keep_latest, lock_until, fair share,
named limits): one task declared once for both sides, the worker module's with its body and the
caller's, whose body never runs; the servers a test runs them on; a unique node name; what a
skipped call answers; the key a call locks."""

from __future__ import annotations

import functools
import textwrap
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.contrib.testing import WorkerProcess
from celery_redislock.integration.runtime import runtime_for

from .conftest import worker_module


@dataclass(frozen=True)
class ModeTask:
    """A SingletonTask ``name(self, <params>)`` with ``options``, as a worker module declares it
    (``body``, which may use the preamble's ``coord`` and ``hold``) and as its caller does: the
    same name, parameters (a ``lock_key`` binds the arguments by them) and options."""

    name: str
    params: str
    body: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def with_options(self, **options: Any) -> ModeTask:
        return ModeTask(self.name, self.params, self.body, {**self.options, **options})

    def source(self) -> str:
        """The worker module's declaration of the task."""
        options = "".join(f", {key}={value!r}" for key, value in self.options.items())
        return (
            f"\n\n@app.task(base=SingletonTask, bind=True, name={self.name!r}{options})\n"
            f"def task(self, {self.params}):\n" + textwrap.indent(textwrap.dedent(self.body).strip(), "    ")
        ) + "\n"

    def start(
        self,
        worker_process: Callable[..., WorkerProcess],
        urls: dict[str, str],
        *args: str,
        pool: str = "prefork",
        module: str = "",
    ) -> WorkerProcess:
        """A worker subprocess (``args``: its options) on a module with the task, then ``module``."""
        source = worker_module(
            urls, self.name.replace(".", "_"), self.source() + "\n" + textwrap.dedent(module)
        )
        return worker_process(source, *args, pool=pool)

    def sender(self, app: Celery) -> Any:
        """The task as the caller declares it on ``app``."""
        namespace: dict[str, Any] = {}
        # The worker's parameters, so a call binds its arguments as the worker does.
        exec(f"def task({self.params}):\n    raise AssertionError('runs in the worker only')", namespace)
        return app.task(base=SingletonTask, shared=False, name=self.name, **self.options)(namespace["task"])


@dataclass(frozen=True)
class Deployment:
    """The servers a worker test runs on and what it starts there (the ``deployment`` fixture):
    their URLs (broker, results, locks, coordination), the test's apps and its worker
    subprocesses, so that a test asks for one fixture, not each of them."""

    urls: dict[str, str]
    make_app: Callable[..., Celery]
    worker_process: Callable[..., WorkerProcess]

    def with_locks(self, url: str) -> Deployment:
        """The same servers but the lock Redis (and fair share's lanes): the one at ``url``, a
        test's own that it stops or flushes; its apps and workers both use it."""
        make_app = functools.partial(self.make_app, redislock_url=url)
        return Deployment({**self.urls, "locks": url}, make_app, self.worker_process)

    def app(self, **conf: Any) -> Celery:
        """An app of the test's on these servers (``conf``: more settings)."""
        return self.make_app(**conf)

    def start(self, task: ModeTask, *args: str, pool: str = "prefork", module: str = "") -> WorkerProcess:
        """A worker subprocess running ``task`` (see ``ModeTask.start``) on these servers."""
        return task.start(self.worker_process, self.urls, *args, pool=pool, module=module)


@dataclass(frozen=True)
class Store:
    """Where a rate-limit test's limits live (the ``store`` fixture): the servers its workers and
    apps use, the limits on ``deployment``'s lock Redis, and a client of that Redis."""

    deployment: Deployment
    client: Any


def node(mode: str) -> str:
    """A node name no other test's worker has, for ``inspect`` and control commands."""
    return f"{mode}-{uuid.uuid4().hex[:8]}@test"


def skipped(result: Any) -> DuplicateTaskError:
    """What a skipped call's caller is answered with."""
    error = result.get(timeout=15, propagate=False)
    assert isinstance(error, DuplicateTaskError), error
    return error


def key_for(app: Celery, task: Any, *args: Any) -> str:
    """The lock key of ``task(*args)`` on ``app``."""
    real = app.tasks[task.name]
    key: str = runtime_for(app).plan(real, None).key(real, args, {})
    assert key.startswith(app.conf.get("redislock_key_prefix") or "redislock")
    return key
