"""A throwaway PostgreSQL server on a free loopback port, started and stopped by its pid, with a
database per test.

The binaries (``initdb``, ``postgres``) are those in ``$REDISLOCK_POSTGRES_BIN``, else the
newest of Debian's ``/usr/lib/postgresql/<version>/bin``, else ``initdb`` on PATH. The cluster
lives in a directory of its own, reached over TCP on 127.0.0.1 only (no Unix socket), with
trust authentication for its one user ``postgres``: nothing is shared with a system cluster.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from celery_redislock.contrib.testing.servers import ServerProcess, free_port, poll

__all__ = ["PostgresServer", "find_postgres_bin"]


def find_postgres_bin(wanted: str | None = None) -> Path:
    """The directory of ``initdb`` and ``postgres``, or a RuntimeError saying how to get them."""
    if wanted is None:
        wanted = os.environ.get("REDISLOCK_POSTGRES_BIN", "").strip()
    if wanted:
        if (Path(wanted) / "initdb").is_file() and (Path(wanted) / "postgres").is_file():
            return Path(wanted)
        raise RuntimeError(f"REDISLOCK_POSTGRES_BIN={wanted!r} holds no initdb and postgres binaries")
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if debian:
        return debian[-1].parent
    found = shutil.which("initdb")
    if found and (Path(found).parent / "postgres").is_file():
        return Path(found).parent
    raise RuntimeError(
        "no PostgreSQL binaries found: install PostgreSQL (apt-get install postgresql) or set "
        "REDISLOCK_POSTGRES_BIN to the directory holding initdb and postgres"
    )


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, the cluster runs as user postgres (Debian's
    package makes it) or nobody; otherwise as the current user (None)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root with no user postgres or nobody to run PostgreSQL as")


class PostgresServer(ServerProcess):
    """A PostgreSQL cluster made with ``initdb`` in a temporary directory, served on a free
    port of 127.0.0.1; ``create_database()`` gives a test a database (and its URL) of its own."""

    user = "postgres"

    def __init__(self, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir or find_postgres_bin()
        self.port = free_port()
        self._own_workdir = True
        # Not under pytest's basetemp, whose directories root keeps to itself (0700): the
        # server's user must reach its data directory.
        self.workdir = Path(tempfile.mkdtemp(prefix="redislock-postgres-"))
        self.datadir = self.workdir / "data"
        self.run_as = _server_user()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def logfile(self) -> Path:
        return self.workdir / "postgres.log"

    def url(self, database: str = "postgres", driver: str = "postgresql") -> str:
        return f"{driver}://{self.user}@127.0.0.1:{self.port}/{database}"

    def _chown(self) -> None:
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            for path in [self.workdir, *self.workdir.rglob("*")]:
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self, timeout: float = 60.0) -> PostgresServer:
        if self.process is not None and self.process.poll() is None:
            return self
        self.logfile.touch()
        self._chown()
        if not self.datadir.exists():
            subprocess.run(
                [str(self.bin_dir / "initdb"), "-D", str(self.datadir), "-U", self.user, "--auth=trust",
                 "--no-sync", "-E", "UTF8", "--locale=C"],
                check=True, capture_output=True, user=self.run_as, cwd=self.workdir,
            )  # fmt: skip
        with self.logfile.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
                 "-h", "127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off",
                 "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, user=self.run_as,
                cwd=self.workdir,
            )  # fmt: skip
        if not poll(self._ready, timeout, 0.05):
            tail = self._log_tail()
            self.stop()
            raise RuntimeError(
                f"postgres did not accept connections on port {self.port} within {timeout}s: {tail}"
            )
        return self

    def _ready(self) -> bool:
        import psycopg

        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"postgres exited on port {self.port}: {self._log_tail()}")
        try:
            psycopg.connect(self.url(), connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropped first if there); its URL (``postgresql://``)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self, timeout: float = 20.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)  # fast shutdown: sessions ended, no checkpoint wait
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
