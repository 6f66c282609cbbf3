"""``page_server``: the real ``celery redislock web`` command serving a page, for the web tests."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from celery_redislock.contrib.testing.servers import free_port
from tests.harness import module_env

from .conftest import poll


def answers(url: str, headers: dict[str, str] | None = None) -> int | None:
    """The HTTP status of a GET of ``url``; None while nothing answers."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=5
        ) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.fixture(name="page_server")
def page_server_fixture(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``page_server(module, *args)``: runs ``celery -A module redislock web --port P *args``
    (the real command) and returns its URL once it answers; stopped by pid after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(module: str, *args: str) -> str:
        port = free_port()
        with (tmp_path / "web.log").open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    module,
                    "redislock",
                    "web",
                    "--port",
                    str(port),
                    *args,
                ],
                cwd=tmp_path,
                env=module_env(tmp_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        url = f"http://127.0.0.1:{port}/"

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "web.log").read_text()
            return answers(url) is not None

        assert poll(up, 30, interval=0.2), (tmp_path / "web.log").read_text()
        return url

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
