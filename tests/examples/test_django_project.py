"""examples/django_project end to end, on SQLite and on PostgreSQL: its migrations, its views
sending calls in ``transaction.on_commit``, a real prefork worker (``celery -A shop worker``)
with the package's settings read as ``CELERY_REDISLOCK_*``, results in the database
(django-celery-results), the lock page for staff, and the fenced write a run paused past its
lock's TTL (SIGSTOP) cannot make.

The Django side runs in processes of its own (tests/examples/django_driver.py), as a web
process would: Django is configured once per process, and each test has its own database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from tests.harness import PostgresServer, module_env, unbroken

pytest.importorskip("django", reason="the django extra (or the test extra) is not installed")
pytest.importorskip("django_celery_results", reason="django-celery-results is not installed")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "django_project"
DRIVER = Path(__file__).resolve().parent / "django_driver.py"

pytestmark = pytest.mark.slow

# The test's settings: the project's, with a short lock TTL (a pause outlasts it in a second)
# and a renderer that holds a report titled "hold..." until the test opens its gate.
TEST_SETTINGS = """
import os

import redis

from shop.settings import *  # noqa: F403

CELERY_REDISLOCK_OPTIONS = {"lock_timeout": 1}
REPORTS_RENDERER = "test_settings.held_render"


def held_render(report, task):
    if report.title.startswith("hold"):
        coord = redis.Redis.from_url(os.environ["COORD_URL"], socket_timeout=None)
        coord.rpush("started:" + task.request.id, os.getpid())
        if coord.blpop("gate:" + task.request.id, timeout=60) is None:
            raise RuntimeError("the test never opened gate:" + task.request.id)
    return f"<h1>{report.title}</h1>"
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database(f"shop_{uuid.uuid4().hex[:12]}")


class Shop:
    """The example project with the test's settings, database and servers."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=PROJECT, env=self.env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    def django(self, step: str, *args: object) -> object:
        """A step of django_driver.py, in a process of its own: what it printed (JSON)."""
        done = subprocess.run(
            [sys.executable, str(DRIVER), step, *map(str, args)], cwd=self.tmp_path, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def worker(self) -> WorkerProcess:
        proc = WorkerProcess(
            PROJECT, "shop", ["-P", "prefork", "-c", "2"], env=self.env, logfile=self.tmp_path / "worker.log"
        )
        proc.wait_ready()
        return proc


@pytest.fixture
def shop(tmp_path: Path, redislock_server: RedisServer, database_url: str) -> Iterator[Shop]:
    (tmp_path / "test_settings.py").write_text(textwrap.dedent(TEST_SETTINGS))
    base = f"redis://127.0.0.1:{redislock_server.port}"
    env = {
        **module_env(tmp_path),
        "DJANGO_SETTINGS_MODULE": "test_settings",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": f"{base}/0",
        "REDISLOCK_URL": f"{base}/2",
        "COORD_URL": f"{base}/3",
    }
    # The test's settings module, then the project, then the package under test.
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(PROJECT), env["PYTHONPATH"]])
    project = Shop(tmp_path, env)
    project.manage("migrate", "--noinput")
    yield project
    with redislock_server.client() as client:
        client.flushall()


@pytest.fixture
def started(shop: Shop) -> Iterator[Callable[[], WorkerProcess]]:
    workers: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        workers.append(shop.worker())
        return workers[-1]

    yield start
    for proc in workers:
        proc.kill()


def held_keys(redislock_server: RedisServer) -> list[str]:
    with redislock_server.client(db=2) as locks:
        return sorted(key.decode() for key in locks.scan_iter("shop:*") if not key.endswith(b":fence"))


def wait_started(coord: redis.Redis, task_id: str) -> int:
    """The pid of the pool process running ``task_id``, once its renderer holds."""
    assert poll(lambda: coord.llen(f"started:{task_id}"), 30), f"{task_id} never started"
    return int(coord.lindex(f"started:{task_id}", 0) or 0)


def test_the_project_sends_on_commit_runs_through_a_worker_and_shows_its_locks_to_staff(
    shop: Shop, started: Callable[[], WorkerProcess], redislock_server: RedisServer
) -> None:
    [report, held] = shop.django("create", "first", "hold page")  # type: ignore[misc]
    sent = shop.django("enqueue", report, "2025-01-31")
    assert isinstance(sent, dict)
    render, digest = "reports.tasks.render_report", "reports.tasks.send_digest"
    # on_commit: nothing published inside the transaction, nothing for the one rolled back.
    assert sent["inside_rolled_back"] == [] and sent["after_rollback"] == []
    assert sent["inside_committed"] == [] and sent["after_commit"] == [render]
    # Locked at enqueue (no worker yet, so the first is queued): the second is not sent, and
    # its view got the queued call's id.
    first, second = sent["digests"]
    assert first == second and sent["published"] == [render, digest]

    started()
    shop.django("wait", first)
    assert shop.django("digest", "2025-01-31") == 2
    row = shop.django("report", report)
    assert isinstance(row, dict)
    assert row["title"] == "edited" and row["body"] == "<h1>edited</h1>"
    # Fenced with the lock's key, the project's prefix from CELERY_REDISLOCK_KEY_PREFIX.
    assert row["fence"] > 0 and row["fence_key"].startswith("shop:reports.tasks.render_report:")
    assert shop.django("results", first) == [["SUCCESS", digest]]

    client = Celery("shop_client", broker=shop.env["CELERY_BROKER_URL"], set_as_current=False)
    holding = client.send_task(render, args=[held]).id
    with redislock_server.client(db=3) as coord:
        wait_started(coord, holding)
        [key] = held_keys(redislock_server)
        page = shop.django("page")
        coord.rpush(f"gate:{holding}", "go")
    assert isinstance(page, dict)
    assert page["anonymous"][0] == 302 and page["anonymous"][1].startswith("/admin/login/")
    assert page["visitor"] == 302  # logged in, not staff: sent to the admin's login too
    status, html = page["staff"]
    # The held lock on the page: its key joined back from the parts it may wrap between.
    assert status == 200 and key in unbroken(html)
    [result] = shop.django("wait", holding)  # type: ignore[misc]
    assert result["written"] is True
    client.close()


def test_a_render_paused_past_its_lock_ttl_has_its_write_refused_by_the_database(
    shop: Shop, started: Callable[[], WorkerProcess], redislock_server: RedisServer
) -> None:
    [report] = shop.django("create", "hold fenced")  # type: ignore[misc]
    started()
    client = Celery("shop_client", broker=shop.env["CELERY_BROKER_URL"], set_as_current=False)
    render = "reports.tasks.render_report"
    with redislock_server.client(db=3) as coord:
        paused = client.send_task(render, args=[report]).id
        pid = wait_started(coord, paused)
        [key] = held_keys(redislock_server)
        os.kill(pid, signal.SIGSTOP)  # its renewal thread stops too: the lock expires
        try:
            assert poll(lambda: key not in held_keys(redislock_server), 10), (
                "the paused run's lock never expired"
            )
            after = client.send_task(render, args=[report]).id
            coord.rpush(f"gate:{after}", "go")
            [second] = shop.django("wait", after)  # type: ignore[misc]
        finally:
            os.kill(pid, signal.SIGCONT)
        coord.rpush(f"gate:{paused}", "go")
        [first] = shop.django("wait", paused)  # type: ignore[misc]
    client.close()

    assert second["written"] is True and second["token"] > first["token"]
    assert first["written"] is False  # its token is smaller than the row's: refused
    row = shop.django("report", report)
    assert isinstance(row, dict)
    assert row["rendered_by"] == after and row["fence"] == second["token"]


def test_a_fenced_write_without_a_token_field_or_key_of_its_own_says_what_is_wrong(shop: Shop) -> None:
    [report] = shop.django("create", "direct")  # type: ignore[misc]
    error = shop.django("direct", report)
    assert isinstance(error, str)
    assert error.startswith("NoFencingTokenError: a fenced write needs a fencing token, and task ")
    assert "reports.tasks.render_report" in error and "runs without a lock" in error
    said = shop.django("bad_input", report)
    assert said == [
        "FenceColumnError: model reports.Digest has no fence column 'fence' for a fenced write: add "
        "`fence = FenceField()` and `fence_key = FenceKeyField()`",
        f"FenceKeyError: reports.Report pk={report} is fenced by lock key 'shop:one', not by 'shop:two': a "
        "token of another key cannot order writes to it (lock both writers on the same lock_key, or "
        "reset the row's fence key to '' to hand it over)",
        "by one",  # neither wrote
    ]
