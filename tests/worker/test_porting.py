"""What a user porting a celery-once / celery-singleton app needs (issue 22), on real workers.

Options that are not options are refused at registration; ``lock_key=[]`` is one run at a time;
``on_duplicate="raise"`` raises at send; refusals at send are counted; the parent's release of a
dead child's lock is logged; errors read as well in ``repr()`` as in ``str()``.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import signal
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import redis
from celery import Celery

from celery_redislock import (
    DuplicateTaskError,
    LockKeyError,
    LockUnavailableError,
    OptionError,
    SingletonTask,
)
from celery_redislock.contrib.testing import RedisServer
from celery_redislock.ops.stats import counters

from .conftest import WorkerProcess, lock_keys, open_gate, poll, stats_of, wait_started, worker_module

_names = itertools.count()


def register(app: Celery, base: type = SingletonTask, **keywords: Any) -> Any:
    """Register a task of ``base`` with ``keywords`` on ``app`` and return it (bound)."""

    @app.task(base=base, shared=False, name=f"porting.t{next(_names)}", **keywords)
    def job(a: int, b: int = 0) -> int:
        return a + b

    app.finalize()
    return app.tasks[job.name]


# --- 1. keywords that are not options --------------------------------------------------------


@pytest.mark.parametrize(
    ("keywords", "said"),
    [
        ({"lock_timout": 5}, "is unknown (did you mean 'lock_timeout'?)"),
        ({"on_duplicates": "raise"}, "did you mean 'on_duplicate'?"),
        ({"concurrency": 2}, "did you mean 'max_concurrency'?"),
        (
            {"once": {"keys": ["a"]}},
            """is a celery-once option, which SingletonTask ignores; write lock_key=['a'], """
            """lock_on="enqueue", on_duplicate="raise\"""",
        ),
        (
            {"once": {"keys": [], "timeout": 60, "graceful": True}},
            """write lock_key=[], lock_on="enqueue", on_duplicate="skip", queued_timeout=60""",
        ),
        (
            {"unique_on": ["a"]},
            """celery-singleton option, which SingletonTask ignores; write lock_key=['a'], lock_on="enqueue\"""",
        ),
        ({"unique_on": "a"}, "write lock_key=['a']"),
        ({"unique_on": []}, "leave lock_key unset (an empty unique_on locks on every argument)"),
        ({"lock_expiry": 3600}, "write lock_timeout=3600 (renewed while the task runs"),
        ({"raise_on_duplicate": True}, """write on_duplicate="raise", lock_on="enqueue\""""),
    ],
)
def test_a_misspelt_or_foreign_option_is_an_error_at_registration(
    make_app: Callable[..., Celery], keywords: dict[str, Any], said: str
) -> None:
    app = make_app()
    with pytest.raises(OptionError) as caught:
        register(app, **keywords)
    [keyword] = keywords
    assert caught.value.option == keyword
    assert re.fullmatch(r"task 'porting\.t\d+'", caught.value.source), caught.value.source
    assert str(caught.value).startswith(f"{caught.value.source}: option {keyword!r} ")
    assert said in str(caught.value), str(caught.value)


def test_a_subclass_attribute_is_checked_too_but_not_its_methods(make_app: Callable[..., Celery]) -> None:
    class Base(SingletonTask):
        def lock_keys(self) -> list[str]:  # a method close to lock_key: the subclass's own code
            return []

        report_to = "ops"  # the user's own setting, like nothing of ours

    class Ported(Base):
        unique_on: ClassVar[list[str]] = ["a"]

    app = make_app()
    assert register(app, base=Base).report_to == "ops"
    with pytest.raises(OptionError, match=r"option 'unique_on' is a celery-singleton option"):
        register(app, base=Ported)


def test_celery_keywords_and_the_users_own_attributes_still_register_and_run(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()
    calls: list[tuple[int, str, int]] = []

    @app.task(
        base=SingletonTask,
        shared=False,
        bind=True,
        # The retry's AsyncResult, made in the worker, would subscribe to the result store and
        # linger past the test: nothing here waits on a result.
        ignore_result=True,
        autoretry_for=(KeyError,),
        retry_backoff=False,
        retry_kwargs={"max_retries": 1, "countdown": 0},
        retry_jitter=False,
        time_limit=30,
        soft_time_limit=20,
        acks_late=True,
        store_eager_result=False,
        lock_name="mine",  # not ours, not close enough to an option (0.75): the user's
        timeout=5,
        lock_key=["a"],
    )
    def flaky(self: Any, a: int) -> None:
        calls.append((a, self.lock_name, self.timeout))
        if len(calls) == 1:
            raise KeyError("first try")  # autoretry_for reached the task: retried once

    with worker(app):
        flaky.delay(1)
        assert poll(lambda: len(calls) == 2, 15.0), calls
    assert calls == [(1, "mine", 5)] * 2


def test_a_worker_whose_module_has_a_celery_once_option_does_not_start(
    urls: dict[str, str], tmp_path: Any
) -> None:
    source = worker_module(
        urls,
        "porting",
        """
        @app.task(base=SingletonTask, name="porting.once", once={"keys": ["a"], "graceful": True})
        def once(a):
            return a
        """,
    )
    (tmp_path / "wporting.py").write_text(source)
    proc = WorkerProcess(tmp_path, "wporting", ["-P", "solo"])
    try:
        assert proc.process.wait(60) != 0
    finally:
        proc.stop()
    log = proc.log()
    assert "task 'porting.once': option 'once' is a celery-once option" in log, log
    assert """write lock_key=['a'], lock_on="enqueue", on_duplicate="skip\"""" in log, log
    assert " ready." not in log


# --- 2. lock_key=[]: one at a time ----------------------------------------------------------

ONE_AT_A_TIME = """
@app.task(base=SingletonTask, bind=True, name="porting.sync", lock_key=[], lock_timeout=60)
def sync(self, tenant, tag):
    return hold(self, tag)
"""


def test_an_empty_lock_key_runs_one_execution_of_the_task_whatever_its_arguments(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    worker_process(worker_module(urls, "porting", ONE_AT_A_TIME), "-c", "2")
    client = make_app()
    first = client.send_task("porting.sync", args=[1, "one"])
    wait_started(coord, "one")
    [key] = lock_keys(locks)
    # Other arguments, a free child: still the task's one key, so skipped as a duplicate.
    other = client.send_task("porting.sync", args=[2, "two"])
    error = other.get(timeout=15, propagate=False)
    assert isinstance(error, DuplicateTaskError), error
    assert error.key == key.decode() and error.holder_task_id == first.id
    assert coord.llen("started:two") == 0
    open_gate(coord, "one")
    assert first.get(timeout=15) == "done one"
    assert poll(lambda: lock_keys(locks) == [], 5.0)
    # Free again: the next call, with any arguments, runs.
    third = client.send_task("porting.sync", args=[3, "three"])
    wait_started(coord, "three")
    assert lock_keys(locks) == [key]
    open_gate(coord, "three")
    assert third.get(timeout=15) == "done three"


# --- 3. on_duplicate="raise" raises at send --------------------------------------------------


def refused_send(send: Callable[[], Any]) -> DuplicateTaskError:
    """The DuplicateTaskError ``send`` raises. Caught here, not in the test: a traceback through
    the test's frame would keep its AsyncResults alive (a cycle) until after the result store
    stops, and their clean-up would then fail noisily."""
    with pytest.raises(DuplicateTaskError) as caught:
        send()
    return caught.value.with_traceback(None)


def test_raise_at_enqueue_raises_in_the_caller_and_sends_nothing(
    make_app: Callable[..., Celery], worker: Any, locks: redis.Redis, redislock_server: RedisServer
) -> None:
    app = make_app()
    broker = redislock_server.client(db=0)

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", on_duplicate="raise", lock_key=["a"])
    def report(a: int, fmt: str = "pdf") -> str:
        return f"{a}.{fmt}"

    refused = counters.snapshot()["refused_at_send"]
    first = report.delay(1)
    # A new call: one with a task id of its own (a canvas member, a retry) is always published.
    error = refused_send(lambda: report.apply_async((1,), {"fmt": "csv"}))
    [key] = lock_keys(locks)
    assert (error.key, error.holder, error.holder_task_id) == (key.decode(), f"{first.id}@queued", first.id)
    assert error.task_id not in ("", first.id) and error.task == report.name
    assert f"is held by {first.id}@queued" in str(error)
    assert broker.llen("celery") == 1  # only the first was published
    # Counted in the process that sent it (this one is not a worker: nobody reports it).
    assert counters.snapshot()["refused_at_send"] == refused + 1
    other = report.delay(2)  # another key is not a duplicate
    assert other.id != first.id
    broker.close()

    with worker(app):
        assert first.get(timeout=10) == "1.pdf" and other.get(timeout=10) == "2.pdf"
        assert poll(lambda: lock_keys(locks) == [], 5.0)
        assert report.delay(1, fmt="csv").get(timeout=10) == "1.csv"  # free again: sent and run


def test_a_duplicate_send_without_raise_still_returns_the_holders_result(
    make_app: Callable[..., Celery], redislock_server: RedisServer
) -> None:
    app = make_app(result_backend=None)  # no worker here: nothing to wait for

    @app.task(base=SingletonTask, shared=False, lock_on="enqueue", on_duplicate="retry")
    def report(a: int) -> int:
        return a

    refused = counters.snapshot()["refused_at_send"]
    first = report.delay(1)
    assert report.delay(1).id == first.id
    assert counters.snapshot()["refused_at_send"] == refused + 1


# --- 4. refusals at send inside a worker are counted -----------------------------------------

SENDER = """
@app.task(base=SingletonTask, name="porting.inner", lock_on="enqueue", lock_key=["n"])
def inner(n):
    return n


@app.task(base=SingletonTask, name="porting.inner_raise", lock_on="enqueue", on_duplicate="raise")
def inner_raise(n):
    return n


@app.task(name="porting.outer")
def outer(n):
    # Sent from inside the worker's child: both sends of one n while the first is queued.
    first, second = inner.delay(n), inner.delay(n)
    inner_raise.delay(n)
    try:
        inner_raise.delay(n)
    except Exception as exc:
        return [first.id, second.id, repr(exc)]
    return [first.id, second.id, None]
"""


def test_sends_refused_in_a_worker_child_are_counted_by_inspect(
    urls: dict[str, str],
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    node = f"porting-{uuid.uuid4().hex[:8]}@test"
    # Queue "sent" only: the inner tasks stay queued (and locked) while outer runs.
    # One child, busy with outer: the inner tasks it sends stay queued (locked) meanwhile.
    proc = worker_process(worker_module(urls, "porting", SENDER), "-c", "1", "-n", node)
    client = make_app()
    first_id, second_id, raised = client.send_task("porting.outer", args=[7]).get(timeout=15)
    assert second_id == first_id
    assert raised is not None and raised.startswith("DuplicateTaskError('Duplicate porting.inner_raise["), (
        raised
    )
    reply = stats_of(client, node)
    assert reply is not None and reply["pid"] == proc.pid
    assert reply["counters"]["refused_at_send"] == 2, reply
    assert reply["counters"]["skipped"] == 0, reply


# --- 5. the parent's release of a dead child's lock is logged; repr of errors ----------------

DYING = """
@app.task(base=SingletonTask, bind=True, name="porting.dies", lock_timeout=300)
def dies(self, tag):
    return hold(self, tag)


@app.task(
    base=SingletonTask, bind=True, name="porting.requeued", lock_timeout=300,
    acks_late=True, reject_on_worker_lost=True,
)
def requeued(self, tag):
    return hold(self, tag)


@app.task(
    base=SingletonTask, bind=True, name="porting.retried", lock_timeout=300,
    retry_on_worker_lost=True, default_retry_delay=0,
)
def retried(self, tag):
    return hold(self, tag)
"""


# The worker without the step that frees a child's locks at its exit: the fallbacks alone.
WITHOUT_EXIT_HOOK = """
from celery import signals
from celery_redislock.integration.child_exit import ChildExitRelease


@signals.worker_init.connect(weak=False)
def _without_the_exit_hook(sender=None, **_):
    sender.app.steps["worker"].discard(ChildExitRelease)
"""


# The exit hook's first look finds each child still running (on a busy host the kernel may take
# a while to make a dying child a zombie after its pipes close): the pool may then reap it and
# answer for its request before the hook looks again.
LATE_ZOMBIE = """
from celery_redislock.integration import child_exit

_looked = set()
_alive = child_exit.process_alive


def _late(pid):
    if pid not in _looked:
        _looked.add(pid)
        return True
    return _alive(pid)


child_exit.process_alive = _late
"""


# The exit hook; the same with its first look too early; none (Celery's answers alone).
@pytest.mark.parametrize("hook", ["at-exit", "late-zombie", "fallback"])
@pytest.mark.parametrize("name", ["porting.dies", "porting.requeued", "porting.retried"])
def test_freeing_a_sigkilled_childs_lock_is_logged_at_info_in_the_worker_log(
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
    name: str,
    hook: str,
) -> None:
    exit_hook = hook != "fallback"
    tasks = DYING + {"at-exit": "", "late-zombie": LATE_ZOMBIE, "fallback": WITHOUT_EXIT_HOOK}[hook]
    proc = worker_process(worker_module(urls, "porting", tasks), "-c", "1")
    client = make_app()
    requeue = name != "porting.dies"
    result = client.send_task(name, args=["k"])
    [(child, task_id)] = wait_started(coord, "k")
    [key] = [k.decode() for k in lock_keys(locks)]
    holder = locks.get(key)
    assert holder is not None and f":{child}:" in holder.decode()
    os.kill(child, signal.SIGKILL)
    line = f"Released lock {key} of {name}[{task_id}]: its worker process died"
    assert poll(lambda: line in proc.log(), 10.0), proc.log()
    [logged] = [entry for entry in proc.log().splitlines() if line in entry]
    if exit_hook:
        # The parent, as it saw the child exit, whatever Celery does with the message then; on a
        # busy host the pool may reap the child and report its WorkerLostError before the exit
        # hook looks again, and that report frees the lock in the parent as soon.
        assert "INFO/MainProcess" in logged, logged
        assert f"(pid {child}, freed at its exit)" in logged or "WorkerLostError" in proc.log(), logged
        if requeue:  # Celery's answer (a re-queue, a retry) freed nothing: the hook did
            assert f"(pid {child}, freed at its exit)" in logged, logged
    elif requeue:
        # Celery re-queues the message (or sends a retry of it) and sends the parent no
        # task_failure: the message's next delivery (in the new child) frees the lock of its dead
        # delivery, and says so.
        assert "INFO/ForkPoolWorker-" in logged and f"holder {holder.decode()}" in logged, logged
    else:
        assert "INFO/MainProcess" in logged and "freed at its exit" not in logged, (
            logged
        )  # on WorkerLostError
    if requeue:
        open_gate(coord, "k")
        assert result.get(timeout=15) == "done k"
    else:
        assert result.get(timeout=15, propagate=False).__class__.__name__ == "WorkerLostError"
    assert poll(lambda: lock_keys(locks) == [], 5.0)


@pytest.mark.parametrize(
    "error",
    [
        DuplicateTaskError("proj.t", "id-2", "redislock:proj.t:ab", "id-1@celery@h:7:1", "id-1"),
        LockUnavailableError(
            "proj.t", "id-2", "redislock:proj.t:ab", "redis://h:6379/2", "ConnectionError: refused"
        ),
        LockKeyError("proj.t", "obj", "has type object, which has no canonical form"),
        OptionError("lock_timeout", "task 'proj.t'", "must be > 0, got -1"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_repr_of_an_error_shows_its_message_and_it_survives_a_round_trip(error: Exception) -> None:
    assert repr(error) == f"{type(error).__name__}({str(error)!r})"
    # args are the constructor's: pickle (a prefork child's failure) and a result backend
    # (cls(*args) from JSON) re-create the same error.
    again = pickle.loads(pickle.dumps(error))
    from_json = type(error)(*json.loads(json.dumps(error.args)))
    assert type(again) is type(from_json) is type(error)
    assert str(again) == str(from_json) == str(error)


def test_a_stored_lock_unavailable_error_reads_the_same_in_the_caller(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    with RedisServer() as down:
        url = down.url
    app = make_app(redislock_url=url, redislock_options={"on_redis_error": "fail"})

    @app.task(base=SingletonTask, shared=False)
    def job(n: int) -> int:
        return n

    with worker(app):
        result = job.delay(1)
        error = result.get(timeout=15, propagate=False)
    # Re-created from the result backend: the same type, message and attributes.
    assert isinstance(error, LockUnavailableError), repr(error)
    assert error.task_id == result.id and error.url == url
    assert str(error).startswith(f"Cannot lock {job.name}[{result.id}]: Redis at {url} is unreachable (")
    assert "Connection refused" in str(error) or "Error " in str(error), str(error)
    assert repr(error) == f"LockUnavailableError({str(error)!r})"


def test_a_stored_lock_key_error_is_re_created_as_itself(
    make_app: Callable[..., Celery], worker: Any
) -> None:
    app = make_app()

    def by_tenant(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return str(kwargs["tenant"])  # KeyError for a call without tenant=

    @app.task(base=SingletonTask, shared=False, lock_key=by_tenant)
    def job(*args: Any, **kwargs: Any) -> int:
        return 1

    with worker(app):
        error = job.delay(1).get(timeout=15, propagate=False)
    # Was Exception("<class 'celery_redislock.errors.LockKeyError'>(...)"): cls(*args) failed.
    assert isinstance(error, LockKeyError), repr(error)
    assert (error.task, error.argument) == (job.name, "lock_key")
    assert str(error).startswith(f"task {job.name!r}: argument 'lock_key' raised KeyError: 'tenant'")
