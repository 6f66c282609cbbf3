"""A throwaway RabbitMQ broker on free loopback ports, started and stopped by its pid, with a
vhost per test.

The server is ``$REDISLOCK_RABBITMQ_SERVER``, else Debian's ``/usr/lib/rabbitmq/bin/rabbitmq-server``
(the script ``/usr/sbin/rabbitmq-server`` wraps to run it as user rabbitmq), else
``rabbitmq-server`` on PATH. It runs as the current user, everything it writes (data, logs, its
Erlang cookie) in its own directory, with its own epmd: nothing is shared with a system broker.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from celery_redislock.contrib.testing.servers import ServerProcess, free_ports, poll, stop_process

__all__ = ["RabbitMQServer", "find_rabbitmq_server"]

#: Where Debian (and RabbitMQ's generic unix package, under its own prefix) keeps the script
#: that starts the node as the calling user.
_DEBIAN_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def find_rabbitmq_server(wanted: str | None = None) -> str:
    """Path of the ``rabbitmq-server`` script the tests start, or a RuntimeError saying how to
    get one. ``wanted`` (default: ``$REDISLOCK_RABBITMQ_SERVER``) is a path or a name on PATH."""
    if wanted is None:
        wanted = os.environ.get("REDISLOCK_RABBITMQ_SERVER", "").strip()
    if wanted:
        found = wanted if os.sep in wanted else shutil.which(wanted)
        if found and os.access(found, os.X_OK):
            return found
        raise RuntimeError(f"REDISLOCK_RABBITMQ_SERVER={wanted!r} is not an executable rabbitmq-server")
    if os.access(_DEBIAN_SERVER, os.X_OK):
        return _DEBIAN_SERVER
    found = shutil.which("rabbitmq-server")
    if found:
        return found
    raise RuntimeError(
        "no rabbitmq-server found: install RabbitMQ (apt-get install rabbitmq-server) or set "
        "REDISLOCK_RABBITMQ_SERVER to its rabbitmq-server script"
    )


class RabbitMQServer(ServerProcess):
    """A RabbitMQ node on 127.0.0.1 (AMQP, management API, Erlang distribution and epmd on
    free ports), its own epmd beside it; both stopped by pid. ``add_vhost()`` gives a test a
    broker URL of its own; ``delete_vhost()`` drops it with its queues."""

    user = "guest"
    password = "guest"

    def __init__(self, executable: str | None = None, workdir: str | None = None) -> None:
        self.executable = executable or find_rabbitmq_server()
        self.port, self.management_port, self.dist_port, self.epmd_port = free_ports(4)
        self.nodename = f"redislock-{self.port}@localhost"
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="redislock-rabbitmq-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None

    def url(self, vhost: str = "/") -> str:
        """The broker URL of ``vhost`` (Celery's ``broker_url``)."""
        return (
            f"amqp://{self.user}:{self.password}@127.0.0.1:{self.port}/{urllib.parse.quote(vhost, safe='')}"
        )

    @property
    def logfile(self) -> Path:
        return self.workdir / "rabbitmq.out"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.workdir),  # its Erlang cookie, readable by this user only
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_CONFIG_FILE": str(self.workdir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.workdir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
            "RABBITMQ_PID_FILE": str(self.workdir / "rabbitmq.pid"),
        }

    def _write_config(self) -> None:
        (self.workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "management.tcp.ip = 127.0.0.1\n"
            f"management.tcp.port = {self.management_port}\n"
            "log.console = false\n"
        )
        (self.workdir / "advanced.config").write_text("[].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("")
        (self.workdir / "enabled_plugins").write_text("[rabbitmq_management].\n")

    def start(self, timeout: float = 120.0) -> RabbitMQServer:
        if self.running:
            return self
        self._write_config()
        epmd = shutil.which("epmd") or "epmd"
        # Its own epmd, in the foreground (a node would otherwise start a daemon that outlives it).
        self.epmd = subprocess.Popen(
            [epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with self.logfile.open("wb") as log:
            # A session of its own: stop() can SIGKILL the VM with the script if it hangs.
            self.process = subprocess.Popen(
                [self.executable],
                env=self._env(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not poll(lambda: not self.running or self._answers(), timeout, 0.25) or not self.running:
            tail = self._log_tail()
            self.stop()
            raise RuntimeError(f"rabbitmq-server did not start on port {self.port} within {timeout}s: {tail}")
        return self

    def _answers(self) -> bool:
        """The management API answers and the AMQP port accepts connections (opened last)."""
        try:
            self._api("GET", "/api/overview")
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except (OSError, urllib.error.URLError):
            return False

    def _api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.management_port}{path}", data=data, method=method
        )
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def add_vhost(self, name: str) -> str:
        """A new vhost ``name`` the ``guest`` user may use; returns its broker URL."""
        quoted = urllib.parse.quote(name, safe="")
        self._api("PUT", f"/api/vhosts/{quoted}", {})
        self._api(
            "PUT",
            f"/api/permissions/{quoted}/{self.user}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )
        return self.url(name)

    def queue_info(self, url: str, queue: str) -> dict[str, Any]:
        """What the management API says of ``queue`` in the vhost of broker URL ``url``: its
        ``type``, ``arguments``, ``durable``, ``messages`` ..."""
        info: dict[str, Any] = self._api(
            "GET", f"/api/queues/{_vhost_of(url)}/{urllib.parse.quote(queue, safe='')}"
        )
        return info

    def queues(self, url: str) -> list[dict[str, Any]]:
        """What the management API says of every queue in the vhost of broker URL ``url`` (each
        its ``name``, ``messages``, ``messages_unacknowledged`` ...; refreshed every 5 s)."""
        queues: list[dict[str, Any]] = self._api("GET", f"/api/queues/{_vhost_of(url)}")
        return queues

    def bindings_from(self, url: str, exchange: str) -> list[dict[str, Any]]:
        """The bindings whose source is ``exchange`` in the vhost of broker URL ``url``."""
        path = f"/api/exchanges/{_vhost_of(url)}/{urllib.parse.quote(exchange, safe='')}/bindings/source"
        bindings: list[dict[str, Any]] = self._api("GET", path)
        return bindings

    def delete_vhost(self, name: str) -> None:
        """Drop vhost ``name``, its queues and their messages."""
        try:
            self._api("DELETE", f"/api/vhosts/{urllib.parse.quote(name, safe='')}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def stop(self, timeout: float = 30.0) -> None:
        process, self.process = self.process, None
        # The script traps SIGTERM and stops the VM, its child, in the session it was started in.
        stop_process(process, timeout, group=True)
        epmd, self.epmd = self.epmd, None
        stop_process(epmd, timeout)


def _vhost_of(url: str) -> str:
    """The vhost of a broker URL ``add_vhost`` gave, quoted for the management API's paths."""
    return urllib.parse.quote(urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/")), safe="")
