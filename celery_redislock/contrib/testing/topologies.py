"""Throwaway Redis topologies for tests: a Sentinel set and a Redis Cluster, of RedisServers."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from .servers import RedisServer, find_redis_server, free_ports

__all__ = ["ClusterSet", "SentinelSet"]


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
        # The Sentinels promote only a replica they see in sync: after a failover the old master
        # must first be seen so (else NOGOODSLAVE), so a second failover waits for it.
        self.wait_stable(timeout)
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
        # then it still takes writes from clients connected to it, which the guarantees page describes.
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
