"""A throwaway SQS endpoint on a free loopback port: moto's server (``python -m moto.server``,
the ``moto[server]`` package of the test extra), started and stopped by its pid. It is moto's
emulation of SQS, not AWS: what it keeps of SQS's semantics (visibility timeouts, long polling,
per-message delays) is what the tests on it show.

``transport(prefix)`` is the broker a test gives Celery: kombu's SQS transport (which needs
boto3 and pycurl, kombu's ``sqs`` extra) pointed at the server, its queues named under
``prefix`` so that no test sees another's.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from celery_redislock.contrib.testing.servers import ServerProcess, free_port, poll, stop_process

__all__ = ["SQS_CREDENTIALS", "MotoServer", "sqs_missing"]

#: What kombu signs its requests with: moto checks no signature, but botocore signs every call.
SQS_CREDENTIALS = ("testing", "testing")

#: The modules an SQS broker on moto needs, and the package that brings each.
_NEEDED = {"moto": "moto[server]", "flask": "moto[server]", "boto3": "kombu[sqs]", "pycurl": "kombu[sqs]"}


def sqs_missing() -> str | None:
    """Why an SQS broker on moto cannot run here (the packages missing), or None when it can."""
    missing = sorted(
        {package for module, package in _NEEDED.items() if importlib.util.find_spec(module) is None}
    )
    if not missing:
        return None
    return f"an SQS broker on moto needs {' and '.join(missing)} (the test extra: pip install -e '.[test]')"


class MotoServer(ServerProcess):
    """moto's server on 127.0.0.1, started and stopped by its pid."""

    def __init__(self, port: int | None = None, workdir: str | None = None) -> None:
        self.port = port or free_port()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="redislock-moto-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def logfile(self) -> Path:
        return self.workdir / f"moto-{self.port}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def broker_url(self) -> str:
        """Celery's ``broker_url``: kombu's SQS transport takes its endpoint from the URL's host
        and port (``is_secure`` False in ``transport`` makes it http) and its AWS keys from the
        URL's user and password."""
        key, secret = SQS_CREDENTIALS
        return f"sqs://{key}:{secret}@127.0.0.1:{self.port}"

    def transport(self, prefix: str, visibility_timeout: float, **more: Any) -> dict[str, Any]:
        """``broker_transport_options`` of a test's app and worker: its queues named under
        ``prefix``, given out again ``visibility_timeout`` seconds after they were received;
        long polls of a second and no pause between polls, so a message is received promptly."""
        return {
            "region": "us-east-1",
            "is_secure": False,
            "queue_name_prefix": prefix,
            "visibility_timeout": visibility_timeout,
            "wait_time_seconds": 1,
            "polling_interval": 0.1,
            **more,
        }

    def start(self, timeout: float = 30.0) -> MotoServer:
        if self.running:
            return self
        with self.logfile.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if not poll(lambda: not self.running or self._answers(), timeout, 0.05) or not self.running:
            tail = self._log_tail()
            self.stop()
            raise RuntimeError(f"moto's server did not start on port {self.port} within {timeout}s: {tail}")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        stop_process(process, timeout)
