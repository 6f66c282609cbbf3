"""Fenced writes with SQLAlchemy (celery_redislock.contrib.fencing.sqlalchemy) through a real
prefork worker, on SQLite and on PostgreSQL: a run paused (SIGSTOP) past its lock's TTL has its
late write refused by the database; a token of another lock key, a task without fencing=True
and a table without fence columns are errors naming what is wrong."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from .conftest import WorkerProcess, lock_keys, open_gate, poll, wait_started, worker_module

sa = pytest.importorskip("sqlalchemy", reason="the sqlalchemy extra (or the test extra) is not installed")

from celery_redislock.contrib.fencing import (  # noqa: E402
    Fence,
    FenceColumnError,
    NoFencingTokenError,
    StaleWriteError,
)
from celery_redislock.contrib.fencing.sqlalchemy import fence_columns, fenced_update  # noqa: E402

TASKS = """
import sqlalchemy as sa

from celery_redislock.contrib.fencing import FencingError
from celery_redislock.contrib.fencing.sqlalchemy import fence_columns, fenced_update

doc = sa.Table(
    "doc", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("value", sa.Text),
    *fence_columns(),
)
_engines = {}


def write_doc(task, url, doc_id, value):
    engine = _engines.get(url) or _engines.setdefault(url, sa.create_engine(url))  # per child
    try:
        with engine.begin() as conn:
            fenced_update(task, conn, doc, doc.c.id == doc_id, value=value)
    except FencingError as exc:
        return {"token": task.request.redislock.token, "written": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"token": task.request.redislock.token, "written": True}


@app.task(base=SingletonTask, bind=True, name="fenced.write", lock_timeout=1, fencing=True, lock_key=["doc_id"])
def write(self, url, doc_id, value):
    hold(self, self.request.id)  # started:<its id>, then blocks until the test opens gate:<its id>
    return write_doc(self, url, doc_id, value)


@app.task(base=SingletonTask, bind=True, name="fenced.other", fencing=True, lock_key=["doc_id"])
def other(self, url, doc_id, value):  # another task name: another lock key on the same row
    return write_doc(self, url, doc_id, value)


@app.task(base=SingletonTask, bind=True, name="fenced.unfenced", lock_key=["doc_id"])
def unfenced(self, url, doc_id, value):  # no fencing=True: no token
    return write_doc(self, url, doc_id, value)
"""

DOC = sa.Table(
    "doc",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("value", sa.Text),
    *fence_columns(),
)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fenced.sqlite'}"
    else:
        server = request.getfixturevalue("postgres_server")
        url = server.create_database(f"fenced_{uuid.uuid4().hex[:12]}").replace(
            "postgresql://", "postgresql+psycopg://"
        )
    engine = sa.create_engine(url)
    DOC.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(DOC).values(id=1, value="initial"))
    engine.dispose()
    yield url


def stored(url: str) -> tuple[Any, ...]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(sa.select(DOC.c.value, DOC.c.fence, DOC.c.fence_key)).one()
    engine.dispose()
    return tuple(row)


def test_a_run_paused_past_its_lock_ttl_has_its_write_refused_by_the_database(
    db_url: str,
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
) -> None:
    worker_process(worker_module(urls, "fenced", TASKS), "-c", "2")
    client = make_app()

    paused = client.send_task("fenced.write", args=[db_url, 1, "from the paused run"])
    [(pid, _)] = wait_started(coord, paused.id)
    [key] = [k for k in lock_keys(locks) if not k.endswith(b":fence")]
    os.kill(pid, signal.SIGSTOP)  # its renewal thread stops too: the lock expires
    try:
        assert poll(lambda: not locks.exists(key), timeout=10)
        after = client.send_task("fenced.write", args=[db_url, 1, "from the next run"])
        open_gate(coord, after.id, times=1)
        second = after.get(timeout=20)
    finally:
        os.kill(pid, signal.SIGCONT)
    open_gate(coord, paused.id, times=1)
    first = paused.get(timeout=20)

    assert second["written"] is True and second["token"] > first["token"]
    assert first["written"] is False  # refused by the database: its token is below the row's
    assert first["error"].startswith("StaleWriteError: write to table 'doc' where doc.id = :id_1 refused")
    assert stored(db_url) == ("from the next run", second["token"], key.decode())


def test_a_token_of_another_key_and_a_task_without_fencing_are_refused_with_their_reason(
    db_url: str,
    urls: dict[str, str],
    coord: redis.Redis,
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
) -> None:
    worker_process(worker_module(urls, "fenced", TASKS), "-c", "2")
    client = make_app()
    first = client.send_task("fenced.write", args=[db_url, 1, "written"])
    open_gate(coord, first.id, times=1)
    assert first.get(timeout=20)["written"] is True
    row = stored(db_url)

    other = client.send_task("fenced.other", args=[db_url, 1, "from another key"]).get(timeout=20)
    assert other["written"] is False and other["token"] > first.get()["token"]  # larger, but another key's
    assert other["error"].startswith("FenceKeyError: table 'doc' where doc.id = :id_1 is fenced by lock key ")
    assert row[2] in other["error"] and "redislock:fenced.other:" in other["error"]

    unfenced = client.send_task("fenced.unfenced", args=[db_url, 1, "no token"]).get(timeout=20)
    assert unfenced["error"] == (
        "NoFencingTokenError: a fenced write needs a fencing token, and task 'fenced.unfenced' has "
        "none: declare the task with fencing=True"
    )
    assert stored(db_url) == row  # neither wrote


def test_a_table_without_fence_columns_and_a_write_of_an_old_token_are_named(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'plain.sqlite'}")
    plain = sa.Table(
        "plain", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("v", sa.Text)
    )
    plain.metadata.create_all(engine)
    DOC.metadata.create_all(engine)
    with engine.begin() as conn:
        with pytest.raises(FenceColumnError) as caught:
            fenced_update(Fence("k", 5), conn, plain, plain.c.id == 1, v="x")
        assert str(caught.value) == (
            "table 'plain' has no fence column 'fence' for a fenced write: add the columns of "
            "fence_columns() (or the Fenced mixin)"
        )
        conn.execute(sa.insert(DOC).values(id=1, value="initial"))
        assert fenced_update(Fence("k", 5), conn, DOC, DOC.c.id == 1, value="five") == 1
        with pytest.raises(StaleWriteError) as stale:
            fenced_update(Fence("k", 5), conn, DOC, DOC.c.id == 1, value="five again")  # not above 5
        assert (stale.value.token, stale.value.stored_token) == (5, 5)
        with pytest.raises(LookupError, match="selects no row"):
            fenced_update(Fence("k", 6), conn, DOC, DOC.c.id == 2, value="nowhere")
        with pytest.raises(NoFencingTokenError, match="pass the bound task"):
            fenced_update(5, conn, DOC, DOC.c.id == 1, value="a bare token")
        assert conn.execute(sa.select(DOC.c.value, DOC.c.fence)).one() == ("five", 5)
    engine.dispose()
