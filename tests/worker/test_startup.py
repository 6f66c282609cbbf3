"""Bad ``redislock_*`` settings stop a real ``celery worker`` process before it consumes anything.

Each test writes an app module, sends one message to the queue the worker would consume
(before the worker starts, through a plain app on the same broker), starts
``celery -A module worker`` as a process and checks: the exit status is ``EX_CONFIG``, the
output has exactly one ``Error:`` line naming the setting, the option and what is wrong (no
traceback), and the message is still in the broker.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import RedisServer, poll
from celery_redislock.integration.bootstep import EX_CONFIG
from tests.harness import module_env

from .conftest import WorkerProcess

APP = """
from celery import Celery
from celery_redislock import SingletonTask

app = Celery("startup")
app.conf.update(
    broker_url={broker!r},
    broker_transport_options={transport!r},
    broker_connection_retry_on_startup=False,
    task_default_queue="celery",
)
app.conf.update({settings})


@app.task(base=SingletonTask, name="startup.touch"{task_options})
def touch(x):
    return x
"""


@dataclass
class Outcome:
    returncode: int
    output: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.startswith("Error:")]


@pytest.fixture
def broker(redislock_server: RedisServer) -> Iterator[redis.Redis]:
    """The broker database (db 0 of the session's server), emptied after the test."""
    client = redislock_server.client(db=0)
    yield client
    client.flushdb()
    client.close()


def write_app(workdir: Path, broker_url: str, settings: dict[str, Any], **extra: Any) -> str:
    module = "startup_app"
    task_options = "".join(f", {name}={value!r}" for name, value in extra.pop("task_options", {}).items())
    source = APP.format(
        broker=broker_url,
        transport=extra.pop("transport", {}),
        settings=repr(settings),
        task_options=task_options,
    )
    (workdir / f"{module}.py").write_text(textwrap.dedent(source))
    return module


def send_one(broker_url: str, queue: str, transport: dict[str, Any] | None = None) -> None:
    """One ``startup.touch`` message on ``queue``, sent by a plain app that checks nothing."""
    sender = Celery("sender", set_as_current=False)
    sender.conf.update(broker_url=broker_url, broker_transport_options=transport or {})
    try:
        sender.send_task("startup.touch", args=(1,), queue=queue)
    finally:
        sender.close()


def run_worker(workdir: Path, module: str, *args: str, timeout: float = 30.0) -> Outcome:
    """Run the worker until it exits, or until it says ``ready.`` (then it is stopped)."""
    logfile = workdir / "worker.log"
    with logfile.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", module, "worker", "-P", "solo", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat", *args],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=module_env(workdir),
        )  # fmt: skip
    try:
        poll(lambda: process.poll() is not None or " ready." in logfile.read_text(errors="replace"), timeout)
    finally:
        if process.poll() is None:  # it started after all (or hangs): stop it by its pid
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(20)
    return Outcome(process.returncode, logfile.read_text(errors="replace"))


def assert_refused(outcome: Outcome, *expected: str) -> str:
    """The worker exited with EX_CONFIG printing one Error line containing each of ``expected``."""
    assert outcome.returncode == EX_CONFIG, outcome.output
    assert "Traceback" not in outcome.output, outcome.output
    assert " ready." not in outcome.output, outcome.output
    assert len(outcome.error_lines) == 1, outcome.output
    line = outcome.error_lines[0]
    assert line.startswith("Error: celery_redislock cannot start this worker: "), line
    for text in expected:
        assert text in line, line
    return line


def queued(broker: redis.Redis, queue: str) -> int:
    """Messages waiting in ``queue`` of the Redis broker, plus any taken and not acknowledged."""
    return int(broker.llen(queue)) + int(broker.hlen("unacked"))


# --- one case each, as the issue lists them --------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param(
            {"redislock_options": {"lock_timout": 5}},
            ["redislock_options: option 'lock_timout' is unknown", "did you mean 'lock_timeout'?"],
            id="unknown-option-typo",
        ),
        pytest.param(
            {"redislock_queues": {"celery": {"on_duplicate": "explode"}}},
            [
                "redislock_queues['celery']: option 'on_duplicate' must be one of",
                "got 'explode'",
            ],
            id="bad-queue-value",
        ),
        pytest.param(
            {"redislock_url": "sentinel://127.0.0.1:26379/0"},
            ["redislock_url is a Sentinel URL", "no 'master_name'"],
            id="sentinel-without-master-name",
        ),
        pytest.param(
            {
                "redislock_url": "sentinel://127.0.0.1:notaport/0",
                "redislock_transport_options": {"master_name": "mymaster"},
            },
            ["redislock_url: the Redis URL for the locks cannot be parsed", "notaport"],
            id="sentinel-bad-port",
        ),
        pytest.param(
            {"redislock_url": "redis://127.0.0.1:7000/3?cluster=true"},
            ["redislock_url names a Redis Cluster, which has only database 0", "/3?cluster=true"],
            id="cluster-with-a-database",
        ),
        pytest.param(
            {"redislock_url": "redis://127.0.0.1:7000/0?cluster=maybe"},
            ["cluster='maybe'", "must be true or false"],
            id="cluster-flag-unclear",
        ),
        pytest.param(
            {"redislock_url": "redis://:secret@127.0.0.1:6379/locks"},
            ["redislock_url: the Redis URL for the locks cannot be parsed", "'locks' is not a number"],
            id="database-not-a-number",
        ),
    ],
)
def test_bad_setting_stops_the_worker(
    tmp_path: Path, redislock_url: str, broker: redis.Redis, settings: dict[str, Any], expected: list[str]
) -> None:
    module = write_app(tmp_path, redislock_url, settings)
    send_one(redislock_url, "celery")
    line = assert_refused(run_worker(tmp_path, module), *expected)
    assert "secret" not in line
    assert queued(broker, "celery") == 1


def test_no_usable_redis_url_stops_the_worker(tmp_path: Path) -> None:
    # A broker that is not Redis (kombu's filesystem transport) and no redislock_url.
    folder = tmp_path / "broker"
    folder.mkdir()
    # control_folder too: kombu writes the fanout exchanges there (default: ./control).
    transport = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),
    }
    module = write_app(tmp_path, "filesystem://", {}, transport=transport)
    send_one("filesystem://", "celery", transport)
    assert len(list(folder.iterdir())) == 1
    assert_refused(
        run_worker(tmp_path, module),
        "no Redis URL for the locks",
        "broker_url='filesystem://'",
        'set redislock_url = "redis://host:6379/0"',
    )
    assert len(list(folder.iterdir())) == 1  # the message file is still there


def test_a_clash_between_task_and_consumed_queue_stops_the_worker(
    tmp_path: Path, redislock_url: str, broker: redis.Redis
) -> None:
    # Each layer is valid alone; together renew_interval (queue) >= lock_timeout (task).
    settings = {"redislock_queues": {"reports": {"renew_interval": 5}}}
    module = write_app(tmp_path, redislock_url, settings, task_options={"lock_timeout": 2})
    send_one(redislock_url, "reports")
    assert_refused(
        run_worker(tmp_path, module, "-Q", "reports"),
        "task 'startup.touch': option 'renew_interval' must be < lock_timeout",
        "got 5 from redislock_queues['reports']",
    )
    assert queued(broker, "reports") == 1


def test_the_same_worker_with_good_settings_consumes_the_message(
    tmp_path: Path, redislock_url: str, broker: redis.Redis
) -> None:
    # The control for the tests above: the harness sees a message consumed when it is. The
    # clash of the test above is on a queue this worker does not consume, so it starts.
    settings = {
        "redislock_options": {"lock_timeout": 5},
        "redislock_queues": {"reports": {"renew_interval": 5}},
    }
    module = write_app(tmp_path, redislock_url, settings, task_options={"lock_timeout": 2})
    send_one(redislock_url, "celery")
    worker = WorkerProcess(tmp_path, module, ["-P", "solo", "-Q", "celery"])
    try:
        worker.wait_ready()
        assert poll(lambda: queued(broker, "celery") == 0, timeout=15), worker.log()
        assert poll(lambda: "startup.touch" in worker.log() and "succeeded" in worker.log(), timeout=15)
    finally:
        worker.stop()
