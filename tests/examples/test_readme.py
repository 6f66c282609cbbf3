"""The README's quick start and every recipe, run against a real redis-server and a real worker.

The convention: a ```python block right after a ``<!-- readme-test: NAME -->`` line is run by
the test of that name, and every Python block of the README has one. The test wraps a block:

- it runs it in a namespace holding ``app`` (a Celery app on the test's redis-server: broker
  db 0, results db 1), ``SingletonTask`` and ``work``, the README's stand-in for "your code":
  it records each call and blocks until the test lets the bodies finish;
- the README's ``redis://localhost:6379/N`` becomes the test server's, and its tasks are
  registered ``shared=False`` (no other app of the test process sees them);
- a worker runs in the test's process (threads pool, two threads).

Nothing is inserted into a block: what a reader copies is what runs. A test that needs a body
to end at a moment of its own (``work.finish()``) does it from outside the block (a signal).

The quick start is run as a reader runs it, with nothing supplied: its first block is ``proj.py``,
a worker subprocess runs it (the README's command), and its second block runs as a script of its
own that imports the task; only the Redis URL is the test server's.

Self-contained (its own server and worker, no conftest fixtures), so that ``.ci/package-check``
runs the quick start with the built wheel in a clean venv:
``pytest --noconftest tests/examples/test_readme.py -k quickstart``.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.asynchronous import set_event_loop

from celery_redislock import DuplicateTaskError, SingletonTask
from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll
from celery_redislock.integration.runtime import reset_runtime
from celery_redislock.signals import task_rate_limited

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = re.compile(r"<!-- readme-test: ([\w-]+) -->\n```python\n(.*?)\n```", re.S)
_names = itertools.count()


def readme_blocks() -> dict[str, str]:
    blocks: dict[str, str] = {}
    for name, source in MARKER.findall(README.read_text()):
        assert name not in blocks, f"README: two blocks marked readme-test: {name}"
        blocks[name] = source
    return blocks


class Work:
    """``work(...)`` of the README: records each call, then blocks until ``finish()``."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.running = 0
        self._lock = threading.Lock()
        self._gate = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append((args, kwargs))
            self.running += 1
        try:
            if not self._gate.wait(30):
                raise RuntimeError("the test never let the body finish")
        finally:
            with self._lock:
                self.running -= 1

    def finish(self) -> None:
        """Lets every body, running or to come, return at once."""
        self._gate.set()

    def wait_started(self, count: int = 1, timeout: float = 15.0) -> None:
        assert poll(lambda: len(self.calls) >= count, timeout), (
            f"{count} body(ies) did not start: {self.calls}"
        )

    def args(self) -> list[tuple[Any, ...]]:
        return [args for args, _ in self.calls]


class Readme:
    """Runs the README's blocks in one namespace, with ``app`` on the test's server."""

    def __init__(self, server: RedisServer) -> None:
        self.base = f"redis://127.0.0.1:{server.port}"
        self.work = Work()
        self.apps: list[Celery] = []
        self.namespace: dict[str, Any] = {"__name__": f"readme{next(_names)}", "work": self.work}
        self.namespace["SingletonTask"] = SingletonTask
        self.namespace["app"] = Celery(
            self.namespace["__name__"],
            broker=f"{self.base}/0",
            backend=f"{self.base}/1",
            set_as_current=False,
        )

    def run(self, name: str) -> str:
        """Runs block ``name``, as it is; returns what it printed."""
        source = readme_blocks()[name].replace("redis://localhost:6379", self.base)
        source = source.replace("@app.task(", "@app.task(shared=False, ")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"README.md[{name}]", "exec"), self.namespace)
        return out.getvalue()

    def __getattr__(self, name: str) -> Any:  # the names the blocks defined
        try:
            return self.namespace[name]
        except KeyError:
            raise AttributeError(name) from None

    @contextlib.contextmanager
    def worker(self) -> Iterator[None]:
        app: Celery = self.namespace["app"]
        self.apps.append(app)
        app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=False)
        # A hub of its own: kombu keeps the event loop process-wide (see tests/worker/conftest.py).
        set_event_loop(None)
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10):
            try:
                yield
            finally:
                self.work.finish()

    def close(self) -> None:
        self.work.finish()
        for app in {id(app): app for app in [*self.apps, self.namespace["app"]]}.values():
            consumer = getattr(app.backend, "result_consumer", None)
            if consumer is not None:  # the Redis backend's subscriptions, closed while it is up
                consumer.subscribed_to.clear()
                consumer.stop()
            reset_runtime(app)
            app.close()


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


@pytest.fixture
def readme(server: RedisServer) -> Iterator[Readme]:
    runner = Readme(server)
    yield runner
    runner.close()
    with server.client() as client:
        client.flushall()


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    with server.client() as c:
        yield c


def test_every_python_block_of_the_readme_is_run_by_a_test() -> None:
    text = README.read_text()
    assert len(re.findall(r"^```python$", text, re.M)) == len(MARKER.findall(text))
    tests = [name.removeprefix("test_") for name in globals() if name.startswith("test_")]
    for block in readme_blocks():  # quickstart-calls is run by test_quickstart
        assert any(block.replace("-", "_").startswith(test) for test in tests), block


def readme_worker_command() -> list[str]:
    """The worker command of the quick start, as the README gives it."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    (command,) = re.findall(r"`(celery -A [^`]*)`", section)
    return command.split()


def test_quickstart(server: RedisServer, tmp_path: Path) -> None:
    # As a reader runs it: proj.py is the first block, a worker runs it (the README's command,
    # two processes), and the second block runs in a process of its own that imports the task.
    base = f"redis://127.0.0.1:{server.port}"
    blocks = {
        name: source.replace("redis://localhost:6379", base) for name, source in readme_blocks().items()
    }
    (tmp_path / "proj.py").write_text(blocks["quickstart"] + "\n")
    (tmp_path / "calls.py").write_text(blocks["quickstart-calls"] + "\n")
    assert readme_worker_command() == ["celery", "-A", "proj", "worker", "-l", "INFO"]
    worker = WorkerProcess(tmp_path, "proj", ["--concurrency", "2"])  # "-l INFO" is its --loglevel=INFO
    try:
        worker.wait_ready()
        calls = subprocess.run(
            [sys.executable, "calls.py"],
            cwd=tmp_path,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        worker.stop()
        with server.client() as client:
            client.flushall()
    assert calls.returncode == 0, calls.stderr
    lines = sorted(calls.stdout.splitlines(), key=lambda line: "skipped" in line)
    assert len(lines) == 2, calls.stdout
    ran, skipped = lines[0].split(), lines[1].split()
    assert ran[1:] == ["ran:", "index", "1", "rebuilt"], calls.stdout
    assert skipped[1:4] == ["skipped,", "held", "by"] and skipped[4] == ran[0], calls.stdout
    # The INFO line the README shows, naming the skipped call and the running one.
    log = worker.log()
    line = re.compile(
        rf"Skipped duplicate proj\.rebuild_index\[{skipped[0]}\]: redislock:proj\.rebuild_index:[0-9a-f]{{32}} "
        rf"is held by {ran[0]}@celery@"
    )
    assert line.search(log), log[-3000:]
    assert f"Task proj.rebuild_index[{ran[0]}] succeeded" in log, log[-3000:]


def test_on_duplicate(readme: Readme, client: redis.Redis) -> None:
    readme.run("on-duplicate")
    with readme.worker():
        first = readme.sync_account.delay(7)
        readme.work.wait_started()
        second = readme.sync_account.delay(7)
        (key,) = client.scan_iter("redislock:*")
        # The second waits: subscribed to the lock's release notice.
        assert poll(lambda: client.pubsub_numsub(key + b":released")[0][1] >= 1, 15)
        assert readme.work.running == 1
        readme.work.finish()
        assert first.get(timeout=10) is None and second.get(timeout=10) is None
    assert readme.work.args() == [(7,), (7,)]


def test_enqueue(readme: Readme) -> None:
    readme.run("enqueue")
    with readme.worker():
        first = readme.nightly_export.delay("2024-06-01")
        readme.work.wait_started()
        again = readme.nightly_export.delay("2024-06-01")
        assert again.id == first.id  # nothing sent: the caller waits on the running call
        readme.work.finish()
        assert again.get(timeout=10) is None
    assert readme.work.args() == [("2024-06-01",)]


def test_until_started(readme: Readme) -> None:
    readme.run("until-started")
    first = readme.refresh_feed.delay(7)
    assert readme.refresh_feed.delay(7).id == first.id  # refused while queued
    with readme.worker():
        readme.work.wait_started()
        later = readme.refresh_feed.delay(7)  # sent: the first has started
        assert later.id != first.id
        readme.work.finish()
        assert first.get(timeout=10) is None and later.get(timeout=10) is None
    assert readme.work.args() == [(7,), (7,)]


def test_throttle(readme: Readme) -> None:
    readme.run("throttle")
    readme.work.finish()
    with readme.worker():
        assert readme.send_digest.delay("ops").get(timeout=10) is None
        with pytest.raises(DuplicateTaskError) as refused:
            readme.send_digest.delay("ops").get(timeout=10)
    assert refused.value.holder.endswith("@throttled")
    assert readme.work.args() == [("ops",)]


def test_debounce(readme: Readme) -> None:
    readme.run("debounce")
    readme.work.finish()
    with readme.worker():
        calls = [readme.reindex_document.delay(4, version) for version in range(3)]
        assert calls[-1].get(timeout=20) is None
        for superseded in calls[:-1]:
            with pytest.raises(DuplicateTaskError) as skipped:
                superseded.get(timeout=10)
            assert skipped.value.holder == f"{calls[-1].id}@debounced"
    assert readme.work.args() == [(4, 2)]


def test_keep_latest(readme: Readme) -> None:
    readme.run("keep-latest")
    with readme.worker():
        running = readme.render_preview.delay(3, 0)
        readme.work.wait_started()
        pending = [readme.render_preview.delay(3, version) for version in (1, 2, 3)]
        readme.work.finish()
        assert running.get(timeout=10) is None and pending[-1].get(timeout=20) is None
        for replaced in pending[:-1]:
            with pytest.raises(DuplicateTaskError) as skipped:
                replaced.get(timeout=10)
            assert skipped.value.holder.endswith("@latest")
    assert readme.work.args() == [(3, 0), (3, 3)]


def test_max_concurrency(readme: Readme) -> None:
    readme.run("max-concurrency")
    with readme.worker():
        both = [readme.sync_pages.delay(7, page) for page in (1, 2)]
        readme.work.wait_started(2)
        assert readme.work.running == 2  # one account, two bodies at once
        third = readme.sync_pages.apply(args=(7, 3))  # here, eagerly: the key's two slots are taken
        assert isinstance(third.result, DuplicateTaskError)
        readme.work.finish()
        assert [result.get(timeout=10) for result in both] == [None, None]
    assert sorted(readme.work.args()) == [(7, 1), (7, 2)]


def test_fencing(readme: Readme) -> None:
    readme.run("fencing")
    readme.work.finish()
    with readme.worker():
        for _ in range(2):
            assert readme.render.delay(5).get(timeout=10) is None
    tokens = [kwargs["token"] for _, kwargs in readme.work.calls]
    assert all(isinstance(token, int) for token in tokens) and tokens[1] > tokens[0], tokens


def test_rate_limit(readme: Readme) -> None:
    readme.run("rate-limit")
    readme.work.finish()
    postponed: list[dict[str, Any]] = []
    seen = threading.Event()

    def on_rate_limited(sender: Any = None, **info: Any) -> None:
        postponed.append(info)
        seen.set()

    task_rate_limited.connect(on_rate_limited, weak=False)
    try:
        with readme.worker():
            calls = [readme.call_partner_api.delay(9, n) for n in range(100)]
            assert [call.get(timeout=30) for call in calls] == [None] * 100
            other_account = readme.call_partner_api.delay(10, 0)  # a partition of its own
            assert other_account.get(timeout=10) is None
            readme.call_partner_api.delay(9, 100)  # the 101st start of account 9 this minute
            assert seen.wait(15), "the 101st call was not postponed"
    finally:
        task_rate_limited.disconnect(on_rate_limited)
    assert len(postponed) == 1 and postponed[0]["wait"] > 30, postponed  # its slot: a minute on
    assert len(readme.work.calls) == 101


def test_fair_share(readme: Readme) -> None:
    readme.run("fair-share")
    readme.work.finish()
    # Account 1's hundred calls queued first, then account 2's three; then a worker starts.
    calls = [readme.export.delay(1, n) for n in range(100)] + [readme.export.delay(2, n) for n in range(3)]
    with readme.worker():
        assert [call.get(timeout=60) for call in calls] == [None] * 103
    order = [args[0] for args, _ in readme.work.calls]
    assert sorted(order) == [1] * 100 + [2] * 3
    # Served in turn: account 2's calls start among the first few dozen, not after account 1's.
    assert max(i for i, account in enumerate(order) if account == 2) < 40, order


def test_the_readme_is_a_front_door_that_renders_on_pypi() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    # PyPI shows the README as the long description: relative links and images break there.
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets and all(t.startswith("https://") for t in targets), [
        t for t in targets if not t.startswith("https://")
    ]
    assert "<img" not in text
    # Development history belongs in commit messages.
    assert not re.search(r"\b(session|issue) \d+|SPEC\.md", text, re.I)
