"""A task's Redis calls in a prefork pool child, seen by wrappers of ``Redis.execute_command`` and
``Pipeline.execute`` set on the classes as OpenTelemetry's redis instrumentation sets its own: every call while it is
there, none once it is taken off (the held connection's direct path), every call again once it
is back. The wrapper writes each call it sees to a file: its own calls would otherwise be seen.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from celery import Celery

from .conftest import WorkerProcess, worker_module

TASKS = """
import redis

SEEN = {seen!r}
original = redis.Redis.execute_command


def traced(self, *args, **options):
    with open(SEEN, "a") as seen:
        keys = " ".join(str(arg) for arg in args[1:5] if str(arg).startswith("redislock:"))
        seen.write(f"{{os.getpid()}} {{args[0]}} {{keys}}\\n")
    return original(self, *args, **options)


original_pipeline = redis.client.Pipeline.execute


def traced_pipeline(self, *args, **options):
    with open(SEEN, "a") as seen:
        for command in self.command_stack:
            called = command.args if hasattr(command, "args") else command[0]
            keys = " ".join(str(arg) for arg in called[1:5] if str(arg).startswith("redislock:"))
            seen.write(f"{{os.getpid()}} {{called[0]}} {{keys}}\\n")
    return original_pipeline(self, *args, **options)


# As RedisInstrumentor().instrument() does, at start-up: commands, and pipelines (the lock's
# SET NX goes in one with the call's record while execute_command is wrapped).
redis.Redis.execute_command = traced
redis.client.Pipeline.execute = traced_pipeline


@app.task(base=SingletonTask, bind=True, name="instrumented.locked")
def locked(self, n):
    return [os.getpid(), self.request.redislock.key]


@app.task(name="instrumented.instrument")
def instrument(on):
    redis.Redis.execute_command = traced if on else original
    redis.client.Pipeline.execute = traced_pipeline if on else original_pipeline
    return os.getpid()
"""

#: A task's calls once its scripts are loaded: the acquire (SET NX), the release.
RELEASES = [["SET", "EVALSHA"], ["SET", "DELIFEQ"], ["SET", "DELEX"]]


def test_a_wrapped_execute_command_sees_every_call_of_the_task_and_none_once_unwrapped(
    urls: dict[str, str],
    tmp_path: Path,
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
) -> None:
    seen = tmp_path / "seen.log"
    worker_process(worker_module(urls, "instrumented", TASKS.format(seen=str(seen))), "-c", "1")
    client = make_app()

    def run_locked(n: int) -> tuple[int, list[str]]:
        """The pool child's pid and the commands the wrapper saw naming the task's lock key,
        each seen in that child."""
        pid, key = client.send_task("instrumented.locked", args=[n]).get(timeout=30)
        lines = seen.read_text().splitlines() if seen.exists() else []
        calls = [line.split() for line in lines if key in line.split()]
        assert all(int(call[0]) == pid for call in calls), calls
        return pid, [call[1] for call in calls]

    def instrument(on: bool) -> int:
        pid: int = client.send_task("instrumented.instrument", args=[on]).get(timeout=30)
        return pid

    child, calls = run_locked(1)
    # The acquire (SET NX) and the release (the release script, by EVAL after a NOSCRIPT on
    # a fresh server, or the server's conditional delete), all in the pool child.
    assert calls in [*RELEASES, ["SET", "EVALSHA", "EVAL"]]

    assert instrument(False) == child
    assert run_locked(2) == (child, [])  # nobody watching: the held connection, directly

    assert instrument(True) == child
    child_again, calls = run_locked(3)
    assert child_again == child
    assert calls in RELEASES
