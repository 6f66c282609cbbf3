"""LockEngine: acquire, renew and release locks in Redis, one Lua script call each."""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol, Union

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from .keys import release_channel, semaphore_keys

__all__ = [
    "AcquireResult",
    "AcquireStatus",
    "ClusterLockEngine",
    "ClusterSemaphoreEngine",
    "Lease",
    "LeaseEngine",
    "LockEngine",
    "LockInfo",
    "RenewReport",
    "SemaphoreEngine",
    "SemaphoreLease",
    "SemaphoreState",
    "SlotResult",
    "make_engine",
    "make_semaphore_engine",
]

#: A client of one Redis (or of a Sentinel-managed master), or of a Redis Cluster.
Client = Union[redis.Redis, RedisCluster]


def _load_script(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(name).read_text(encoding="utf-8")


# Read once per process; each engine registers them on its client (EVALSHA, NOSCRIPT fallback).
_ACQUIRE = _load_script("acquire.lua")
_RELEASE = _load_script("release.lua")
_RENEW = _load_script("renew.lua")
_TRANSFER = _load_script("transfer.lua")
_SEM_ACQUIRE = _load_script("sem_acquire.lua")
_SEM_RELEASE = _load_script("sem_release.lua")
_SEM_RENEW = _load_script("sem_renew.lua")
_SEM_STATE = _load_script("sem_state.lua")


class AcquireStatus(enum.IntEnum):
    """How a successful acquire got the lock; the values are the script's return codes."""

    TAKEN = 1
    REENTERED = 2
    TAKEN_OVER = 3


@dataclass(frozen=True)
class AcquireResult:
    """Outcome of one acquire: ``status`` is None when ``holder`` (someone else) has the lock."""

    status: AcquireStatus | None
    holder: str

    @property
    def acquired(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class Lease:
    """A lock this process holds: what the renewal timer needs to keep it alive."""

    key: str
    holder: str
    ttl_ms: int


@dataclass
class RenewReport:
    """Per-key outcome of a batch renewal."""

    renewed: list[Lease] = field(default_factory=list)
    #: were gone (expired, Redis restarted) and free: taken back for their holder
    retaken: list[Lease] = field(default_factory=list)
    #: held by another holder now: (lease, that holder's id)
    stolen: list[tuple[Lease, str]] = field(default_factory=list)

    def merge(self, other: RenewReport) -> None:
        self.renewed += other.renewed
        self.retaken += other.retaken
        self.stolen += other.stolen


@dataclass(frozen=True)
class LockInfo:
    """A lock key as found: its holder id (None: gone, or not a lock) and Redis' PTTL."""

    key: str
    holder: str | None
    ttl_ms: int


def as_text(value: bytes | str) -> str:
    """A reply as str, whether the client decodes responses or not."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class DirectConnection:
    """A connection of this process's own to the lock's Redis, for the calls every task makes.

    redis-py's ``Redis.execute_command`` costs about three times the socket calls it makes
    (pool checkout and return, argument-deprecation wrappers, observability hooks, a retry
    closure: about 30 µs of CPU against 12 µs for a PING sent on a connection directly,
    measured in README, Benchmarks). A task's acquire and release go through this instead:
    one connection made by the client's own pool (same host, credentials, timeouts, retry
    policy; a Sentinel pool's connection finds the master itself), commands sent and read on it
    directly, retried as the client would (its ``Retry``: once, at once, for the lock client).

    Thread-safe without making threads wait: a thread that finds the connection in use (the
    renewal thread, another thread of a threads or gevent pool) takes the pool's path instead.
    A forked child makes its own: the parent's socket is never used from two processes.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        # (pid, mutex, [the connection once made]): replaced whole in a forked child.
        self._state: tuple[int, threading.Lock, list[Any]] | None = None

    @classmethod
    def for_client(cls, client: Client) -> DirectConnection | None:
        """One for ``client``; None for a cluster client (or one bound to a single connection),
        which keeps redis-py's own path."""
        if not isinstance(client, redis.Redis) or getattr(client, "connection", None) is not None:
            return None
        return cls(client)

    def execute(self, *args: Any) -> Any:
        """Send one command and read its reply; raises redis-py's errors. The reply is not put
        through redis-py's response callbacks (a SET that took the key gives ``b"OK"``, or
        ``True`` when the pool's path served it): callers only test for None, or read script
        replies, which have no callback."""
        state = self._state
        if state is None or state[0] != os.getpid():
            state = self._state = (os.getpid(), threading.Lock(), [])
        _, mutex, slot = state
        if not mutex.acquire(blocking=False):
            # In use by another thread: the pool has connections to spare.
            return self._client.execute_command(*args)  # type: ignore[no-untyped-call]
        try:
            if not slot:
                slot.append(self._client.connection_pool.make_connection())
            connection = slot[0]
            return connection.retry.call_with_retry(
                lambda: self._send(connection, args), lambda _error: connection.disconnect()
            )
        finally:
            mutex.release()

    def script(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """EVALSHA of ``script``; EVAL (which also caches it again) after a NOSCRIPT reply."""
        try:
            return self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.execute("EVAL", script.script, len(keys), *keys, *args)

    @staticmethod
    def _send(connection: Any, args: Sequence[Any]) -> Any:
        # is_connected is redis-py >= 6; before it, the socket attribute says the same.
        if not getattr(connection, "is_connected", getattr(connection, "_sock", None) is not None):
            # connect(), not the implicit connect of send_command: a Sentinel-managed
            # connection asks the Sentinels where the master is there.
            connection.connect()
        connection.send_command(*args)
        reply = connection.read_response()
        # A server going away for maintenance asks the client to reconnect (redis-py >= 7).
        should_reconnect = getattr(connection, "should_reconnect", None)
        if should_reconnect is not None and should_reconnect():
            connection.disconnect()
        return reply


class BatchRenewal:
    """Renewal of many leases in as few script calls as the topology allows: one for a single
    Redis. Subclasses say how one batch is renewed; a cluster engine also overrides
    ``_partition`` to split the leases by node or slot, so callers of renew_many never change."""

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport:
        """Renew every lease, one script call per partition (one in all for a single Redis).

        A lease that is gone is taken back where that is free; one held by someone else is
        reported.
        """
        report = RenewReport()
        for batch in self._partition(leases):
            if batch:
                report.merge(self._renew_batch(batch))
        return report

    def _partition(self, leases: Iterable[Lease]) -> Iterator[Sequence[Lease]]:
        yield list(leases)

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        raise NotImplementedError


#: Leases per renewal script call. A script holds Redis for as long as it runs (2 to 3 µs a
#: lock, measured in README, Benchmarks), so a batch is cut into calls of at most this many,
#: pipelined in one round trip: other clients are served between two calls.
RENEW_CHUNK = 500


def chunks(batch: Sequence[Lease], size: int = RENEW_CHUNK) -> list[Sequence[Lease]]:
    """``batch`` cut into runs of at most ``size`` leases, in order."""
    return [batch[start : start + size] for start in range(0, len(batch), size)]


def pipelined_scripts(
    client: redis.Redis, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[str]]]
) -> list[Any]:
    """The replies of ``script`` called once per ``(keys, args)``, all EVALSHAs in one pipeline
    (one round trip). Calls answered NOSCRIPT (a restarted Redis) are sent again once the
    script is loaded; any other error is raised."""
    replies: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for index in pending:
            keys, args = calls[index]
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
        missing = []
        for index, reply in zip(pending, pipe.execute(raise_on_error=False)):
            if isinstance(reply, NoScriptError) and not attempt:
                missing.append(index)
            elif isinstance(reply, Exception):
                raise reply
            else:
                replies[index] = reply
        if not missing:
            break
        client.script_load(script.script)
        pending = missing
    return replies


class LockEngine(BatchRenewal):
    """The Redis side of a lock: every operation is one script call, so one round trip.

    The engine owns no state about who holds what: holders are ids chosen by the caller,
    compared server-side, so any thread or process can renew or release a lock it knows the
    holder id of.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._transfer = client.register_script(_TRANSFER)
        self._direct = DirectConnection.for_client(client)

    def acquire(
        self,
        key: str,
        holder: str,
        ttl_ms: int,
        handover: str | None = None,
        takeover_suffix: str | None = None,
        *,
        expect_free: bool = True,
    ) -> AcquireResult:
        """Take ``key`` for ``holder``, re-enter it if ``holder`` has it, or take it over from
        ``handover`` (an id a previous holder left for this one) or from any holder id ending
        with ``takeover_suffix``; else report the holder.

        The key is usually free: then a plain ``SET NX PX`` takes it, the script's own first
        step, without the cost of a script call. Only when that finds the key held does the
        acquire script run (re-entry, take-over, or reporting the holder): a second round
        trip, on the contended path only. ``expect_free=False`` skips the ``SET`` where the
        caller knows the key is most likely held (a task locked at enqueue, to take over).
        """
        ttl = _ttl(ttl_ms)
        if expect_free and self._set_nx(key, holder, ttl):
            return AcquireResult(AcquireStatus.TAKEN, holder)
        reply = self._script(self._acquire, key, holder, ttl, handover or "", takeover_suffix or "")
        if isinstance(reply, int):
            return AcquireResult(AcquireStatus(reply), holder)
        return AcquireResult(None, as_text(reply))

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        """Delete ``key`` if ``holder`` still has it; PUBLISH the key on ``notify`` if given.

        Returns False when the lock had expired or another holder has it (nothing deleted).
        """
        return bool(self._script(self._release, key, holder, "0", notify or "") == 1)

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool:
        """Delete ``key`` if its holder id starts with ``prefix``: how a parent process frees
        the lock of a child that died, knowing its task id and pid but not its full holder id."""
        return bool(self._script(self._release, key, prefix, "1", notify or "") == 1)

    def transfer(self, key: str, holder: str, to: str, ttl_ms: int) -> bool:
        """Make ``to`` the holder of ``key`` (TTL ``ttl_ms``) if ``holder`` still has it: how
        an execution hands its lock to the next run of its task id."""
        return bool(self._script(self._transfer, key, holder, to, _ttl(ttl_ms)) == 1)

    def _set_nx(self, key: str, holder: str, ttl: str) -> bool:
        """``SET key holder NX PX ttl``: True when it took the key."""
        if self._direct is not None:
            return self._direct.execute("SET", key, holder, "NX", "PX", ttl) is not None
        return bool(self.client.set(key, holder, nx=True, px=int(ttl)))

    def _script(self, script: Script, key: str, *args: str) -> Any:
        """One call of a one-key ``script``, on the direct connection where there is one."""
        if self._direct is not None:
            return self._direct.script(script, [key], args)
        return script(keys=[key], args=args)

    def holder_of(self, key: str) -> str | None:
        """The id holding ``key`` now, or None: for diagnostics, never for a decision."""
        value = self.client.get(key)
        return None if value is None else as_text(value)

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        calls = []
        for chunk in chunks(batch):
            args: list[str] = []
            for lease in chunk:
                args += (lease.holder, _ttl(lease.ttl_ms))
            calls.append(([lease.key for lease in chunk], args))
        assert isinstance(self.client, redis.Redis)  # a cluster's engine overrides this
        return _renew_report(batch, _flatten(pipelined_scripts(self.client, self._renew, calls)))

    # -- many keys at once: listing and purging (the CLI) ------------------------------------

    def scan(self, match: str, count: int) -> Iterator[bytes | str]:
        """Every key matching the glob ``match``, SCAN ``count`` at a time (never KEYS, which
        blocks Redis); a key may come twice, as SCAN promises no more."""
        yield from self.client.scan_iter(match=match, count=count)

    def inspect(self, keys: Sequence[bytes | str]) -> list[LockInfo]:
        """Holder id and PTTL of each key, in one pipeline (one round trip per Redis node)."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
            pipe.pttl(key)
        replies = pipe.execute(raise_on_error=False)
        found = []
        for key, value, pttl in zip(keys, replies[::2], replies[1::2]):
            # A value that is not a string (WRONGTYPE) or a key gone since (None, PTTL -2): no lock.
            holder = as_text(value) if isinstance(value, (bytes, str)) and pttl != -2 else None
            found.append(LockInfo(as_text(key), holder, pttl if isinstance(pttl, int) else -2))
        return found

    def delete_many(
        self, keys: Sequence[bytes | str], notify: Callable[[str], str] | None = None
    ) -> list[bool]:
        """UNLINK each key whoever holds it, and PUBLISH it on ``notify(key)`` as a release
        does, for waiters; one pipeline (one round trip per node). Returns which were deleted."""
        return _delete_many(self.client, keys, notify)


class ClusterLockEngine(LockEngine):
    """A LockEngine on a Redis Cluster. A lock is one key, so one slot: acquire, release and
    transfer go to the key's node as they are. The batched renewal cannot name keys of many
    slots as KEYS (Redis answers CROSSSLOT), so it groups the leases by node and sends each
    node one script call with its keys in ARGV, to that node (``target_nodes``)."""

    client: RedisCluster

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport:
        report = RenewReport()
        failed: list[Lease] = []
        error: redis.RedisError | None = None
        for batch in self._partition(leases):
            try:
                report.merge(self._renew_batch(batch))
            except redis.RedisError as exc:  # this node only: the others are still renewed
                failed += batch
                error = exc
        if error is not None:
            # A failover or a resharding moved slots: learn the slot map again, retry once.
            self.client.nodes_manager.initialize()
            for batch in self._partition(failed):
                report.merge(self._renew_batch(batch))
        return report

    def _partition(self, leases: Iterable[Lease]) -> Iterator[Sequence[Lease]]:
        by_node: dict[str, list[Lease]] = {}
        for lease in leases:
            by_node.setdefault(self._node_of(lease.key).name, []).append(lease)
        yield from by_node.values()

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        # The node's own client: a cluster pipeline refuses EVALSHA, a node's does not.
        node_client = self.client.get_redis_connection(self._node_of(batch[0].key))
        calls = []
        for chunk in chunks(batch):
            args: list[str] = []
            for lease in chunk:
                args += (lease.key, lease.holder, _ttl(lease.ttl_ms))
            calls.append(((), args))
        return _renew_report(batch, _flatten(pipelined_scripts(node_client, self._renew, calls)))

    def _node_of(self, key: str) -> Any:
        """The primary serving ``key``'s slot, as the client's slot map says."""
        return self.client.get_node_from_key(key)  # type: ignore[no-untyped-call]

    def scan(self, match: str, count: int) -> Iterator[bytes | str]:
        # SCAN walks one node's keyspace: walk every primary's.
        for node in self.client.get_primaries():  # type: ignore[no-untyped-call]
            yield from self.client.scan_iter(match=match, count=count, target_nodes=node)

    def delete_many(
        self, keys: Sequence[bytes | str], notify: Callable[[str], str] | None = None
    ) -> list[bool]:
        # A cluster pipeline refuses PUBLISH: send each node's keys through that node's own
        # client instead (PUBLISH reaches subscribers on every node), one pipeline per node.
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for index, key in enumerate(keys):
            node = self._node_of(as_text(key))
            by_node.setdefault(node.name, (node, []))[1].append(index)
        deleted = [False] * len(keys)
        for node, indexes in by_node.values():
            node_client = self.client.get_redis_connection(node)
            for index, gone in zip(indexes, _delete_many(node_client, [keys[i] for i in indexes], notify)):
                deleted[index] = gone
        return deleted


def _delete_many(
    client: Client, keys: Sequence[bytes | str], notify: Callable[[str], str] | None
) -> list[bool]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
        if notify is not None:
            pipe.publish(notify(as_text(key)), key)
    replies = pipe.execute()
    step = 1 if notify is None else 2
    return [bool(deleted) for deleted in replies[::step]]


def make_engine(client: Client) -> LockEngine:
    """The engine for ``client``: a ClusterLockEngine for a RedisCluster."""
    return ClusterLockEngine(client) if isinstance(client, RedisCluster) else LockEngine(client)


def _renew_report(batch: Sequence[Lease], replies: Any) -> RenewReport:
    report = RenewReport()
    for lease, reply in zip(batch, replies):
        if reply == 1:
            report.renewed.append(lease)
        elif reply == 2:
            report.retaken.append(lease)
        else:
            report.stolen.append((lease, as_text(reply)))
    return report


def _flatten(replies: Sequence[Any]) -> list[Any]:
    """The per-lease replies of several renewal calls, in order."""
    return [reply for call in replies for reply in call]


def _ttl(ttl_ms: int) -> str:
    if ttl_ms <= 0:
        raise ValueError(f"lock TTL must be a positive number of milliseconds, got {ttl_ms}")
    return str(int(ttl_ms))


class LeaseEngine(Protocol):
    """What the renewal timer and the release paths need of an engine (locks or semaphores)."""

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport: ...

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool: ...

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool: ...


# -- semaphores ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SemaphoreLease(Lease):
    """A slot of a semaphore this process holds: renewal also needs the semaphore's limit."""

    limit: int = 1


@dataclass(frozen=True)
class SlotResult:
    """Outcome of one semaphore acquire: ``status`` is None when no slot was free for the
    caller; then ``holders`` hold the slots and ``ticket`` is its place in the queue (0: none)."""

    status: AcquireStatus | None
    holders: tuple[str, ...] = ()
    ticket: int = 0

    @property
    def acquired(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class SemaphoreState:
    """A semaphore by the server's clock: live holders with milliseconds left, waiters queued."""

    holders: tuple[tuple[str, int], ...]
    waiting: int


class SemaphoreEngine(BatchRenewal):
    """The Redis side of a fair counting semaphore; every operation is one script call.

    Holders live in a sorted set at the semaphore's key, scored by their expiry on the Redis
    server's clock; waiters in a queue scored by a ticket from a counter (INCR), so they are
    served in arrival order whatever the clocks of their hosts. The auxiliary keys are
    ``keys.semaphore_keys(key)``; a release is published on ``keys.release_channel(key)``.
    Renewal takes a slot that is gone back while the semaphore has one free.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._acquire = client.register_script(_SEM_ACQUIRE)
        self._release = client.register_script(_SEM_RELEASE)
        self._renew = client.register_script(_SEM_RENEW)
        self._state = client.register_script(_SEM_STATE)

    def acquire(
        self,
        key: str,
        holder: str,
        limit: int,
        ttl_ms: int,
        *,
        wait_ttl_ms: int = 0,
        ticket: int = 0,
        siblings: str = "",
    ) -> SlotResult:
        """Take a slot of ``key`` for ``holder`` if one is free for it.

        With ``wait_ttl_ms`` the caller queues (or keeps its place) and must call again within
        that time to stay queued; ``ticket`` is the one an earlier call gave it. Without, it
        never takes a slot a queued waiter is owed. A holder whose id starts with
        ``siblings`` refuses the caller: it is then the only holder reported.
        """
        queue, alive, counter = semaphore_keys(key)
        wait_ttl = _ttl(wait_ttl_ms) if wait_ttl_ms else "0"
        reply = self._acquire(
            keys=[key, queue, alive, counter],
            args=[
                holder,
                str(int(limit)),
                _ttl(ttl_ms),
                wait_ttl,
                str(int(ticket)),
                release_channel(key),
                siblings,
            ],
        )
        if reply[0] != 0:
            return SlotResult(AcquireStatus(reply[0]))
        return SlotResult(None, tuple(as_text(h) for h in reply[2]), int(reply[1]))

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        """Give back ``holder``'s slot (and its place in the queue); False if it had none."""
        return self.release_holders(key, [holder], notify=notify) > 0

    def release_holders(self, key: str, holders: Sequence[str], *, notify: str | None = None) -> int:
        """Give back the slots of ``holders``; returns how many they held."""
        return self._call_release(key, "0", holders, notify)

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool:
        """Give back every slot whose holder id starts with ``prefix`` (a dead process's)."""
        return self._call_release(key, "1", [prefix], notify) > 0

    def _call_release(self, key: str, mode: str, ids: Sequence[str], notify: str | None) -> int:
        queue, alive, _ = semaphore_keys(key)
        return int(self._release(keys=[key, queue, alive], args=[mode, notify or "", *ids]))

    def state(self, key: str) -> SemaphoreState | None:
        """The semaphore at ``key`` now, or None when ``key`` holds something else (a lock)."""
        return self.states([key])[0]

    def states(self, keys: Sequence[str]) -> list[SemaphoreState | None]:
        """:meth:`state` of each key, in one round trip (a pipeline)."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            self._state(keys=[key, semaphore_keys(key)[0]], client=pipe)
        return [_semaphore_state(reply) for reply in pipe.execute()]

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        return _renew_report(batch, _flatten(self._renew_calls([self._renew_call(c) for c in chunks(batch)])))

    def _renew_call(self, chunk: Sequence[Lease]) -> tuple[Sequence[str], Sequence[str]]:
        args: list[str] = []
        for lease in chunk:
            limit = lease.limit if isinstance(lease, SemaphoreLease) else 1
            args += (lease.holder, _ttl(lease.ttl_ms), str(limit), release_channel(lease.key))
        return [lease.key for lease in chunk], args

    def _renew_calls(self, calls: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        assert isinstance(self.client, redis.Redis)
        return pipelined_scripts(self.client, self._renew, calls)


class ClusterSemaphoreEngine(SemaphoreEngine):
    """A SemaphoreEngine on a Redis Cluster: a semaphore's keys share one slot (hash tags, see
    ``keys.semaphore_keys``), so each operation goes to its node as it is; the batched renewal
    sends one call per slot in use, as ``sem_renew`` names its keys in KEYS."""

    client: RedisCluster

    def _partition(self, leases: Iterable[Lease]) -> Iterator[Sequence[Lease]]:
        by_slot: dict[int, list[Lease]] = {}
        for lease in leases:
            by_slot.setdefault(self.client.keyslot(lease.key), []).append(lease)  # type: ignore[no-untyped-call]
        yield from by_slot.values()

    def _renew_calls(self, calls: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[Any]:
        # One slot's semaphores, more than RENEW_CHUNK of them only at a scale a cluster spreads
        # over slots: the chunks go one by one, through the cluster client (which follows a
        # slot that moved), not in one pipeline (a cluster pipeline refuses EVALSHA).
        return [self._renew(keys=keys, args=args) for keys, args in calls]

    def states(self, keys: Sequence[str]) -> list[SemaphoreState | None]:
        # A cluster pipeline refuses EVALSHA: one call per semaphore, each to its node.
        return [_semaphore_state(self._state(keys=[key, semaphore_keys(key)[0]])) for key in keys]


def make_semaphore_engine(client: Client) -> SemaphoreEngine:
    """The semaphore engine for ``client``: a ClusterSemaphoreEngine for a RedisCluster."""
    return ClusterSemaphoreEngine(client) if isinstance(client, RedisCluster) else SemaphoreEngine(client)


def _semaphore_state(reply: list[object] | None) -> SemaphoreState | None:
    if not reply:
        return None
    waiting, live = reply
    assert isinstance(waiting, int) and isinstance(live, list)
    pairs = tuple((as_text(live[i]), int(live[i + 1])) for i in range(0, len(live), 2))
    return SemaphoreState(pairs, waiting)
