"""LockEngine: acquire, renew, transfer and release locks in Redis (one Redis, or a cluster)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from . import conditional_delete
from .conditional_delete import ConditionalDelete
from .decision_record import Record, run_recorded
from .keys import fence_key, parse_key, released_key
from .leases import REDIS_ERRORS, AcquireResult, AcquireStatus, Client, Lease, LockInfo, RenewReport, as_text
from .script_runner import NX, PX, ScriptRunner, pipelined_scripts
from .scripts import (
    ACQUIRE,
    RELEASE,
    RELEASE_BY_OPERATOR,
    RELEASE_EXACT,
    RENEW,
    TRANSFER,
    BatchRenewal,
    chunks,
    flatten,
    renew_report,
    ttl_arg,
    ttl_bytes,
)
from .timing import NO_KEY, time_of, to_ms

__all__ = [
    "FENCE_KEEP_MS",
    "RELEASED_KEEP_MS",
    "SCAN_BATCH",
    "ClusterLockEngine",
    "LockEngine",
    "make_engine",
]

#: Keys per SCAN step, and per pipeline of a listing or a purge: each round trip stays short, so
#: Redis is never blocked for long.
SCAN_BATCH = 1000

#: How long a key's fence counter outlives its last fenced acquisition (at least twice that
#: lock's TTL): 7 days. Should it expire (or Redis restart without it), the next token is
#: seeded from the server's clock in microseconds, still above every token issued before.
FENCE_KEEP_MS = to_ms(7 * 24 * 3600)

#: How long an operator's release of a lock without a TTL is remembered for its holder's renewal
#: (one with a TTL: twice the TTL it had left, by which a live holder has renewed).
RELEASED_KEEP_MS = to_ms(24 * 3600)


class LockEngine(BatchRenewal):
    """The Redis side of a lock: every operation is one script call, so one round trip.

    The engine owns no state about who holds what: holders are ids chosen by the caller,
    compared server-side, so any thread or process can renew or release a lock it knows the
    holder id of.
    """

    def __init__(self, client: Client, *, hold_connection: bool = False) -> None:
        self.client = client
        #: Every call of the engine, and of the modes' scripts (``hold_connection``: the client
        #: is the package's own, ``ScriptRunner`` says why).
        self.runner = ScriptRunner(client, hold=hold_connection)
        #: The server's own compare-and-delete (``conditional_delete``): False until the first
        #: release asks the server; None for none. A forked child keeps the answer (the same
        #: server); a server that stops taking it (failover, ACL) turns it to None.
        self._delete: ConditionalDelete | Literal[False] | None = False

    def acquire(
        self,
        key: str,
        holder: str,
        ttl_ms: int,
        handover: str | None = None,
        takeover_suffix: str | None = None,
        *,
        expect_free: bool = True,
        fencing: bool = False,
        record: Record | None = None,
    ) -> AcquireResult:
        """Take ``key`` for ``holder``, re-enter it if ``holder`` has it, or take it over from
        ``handover`` (an id a previous holder left for this one) or from any holder id ending
        with ``takeover_suffix``; else report the holder.

        The key is usually free: then a plain ``SET NX PX`` takes it, the script's own first
        step, without the cost of a script call. Only when that finds the key held does the
        acquire script run (re-entry, take-over, or reporting the holder): a second round
        trip, on the contended path only. ``expect_free=False`` skips the ``SET`` where the
        caller knows the key is most likely held (a task locked at enqueue, to take over).

        ``fencing=True``: the script issues a fencing token with the lock (``result.token``,
        greater than any issued for ``key`` before) from the counter ``keys.fence_key(key)``,
        in the same round trip; no ``SET NX`` then, which could not issue one.

        ``record``: the decision is kept in the call's record too (``decision_record``), in
        the same round trip.
        """
        ttl = ttl_arg(ttl_ms)
        args: tuple[str, ...] = (holder, ttl, handover or "", takeover_suffix or "")
        keys: tuple[str, ...] = (key,)
        if fencing:
            keys = (key, fence_key(key))
            args = (*args, str(max(FENCE_KEEP_MS, 2 * int(ttl))))
        elif expect_free and self.take(
            key, holder, ttl_ms, b"" if record is None else record.take_quiet(key, parse_key(key)[1])
        ):
            return AcquireResult(AcquireStatus.TAKEN, holder)
        reply = run_recorded(self.runner, ACQUIRE, keys, args, record)
        if isinstance(reply, int):
            return AcquireResult(AcquireStatus(reply), holder)
        if isinstance(reply, list):  # fenced: [code, token, seconds, microseconds]
            code, token, seconds, micros = (int(part) for part in reply)
            return AcquireResult(AcquireStatus(code), holder, token, time_of(seconds, micros))
        return AcquireResult(None, as_text(reply))

    def take(self, key: str, holder: str, ttl_ms: int, quiet: bytes = b"") -> bool:
        """Take a free ``key`` for ``holder`` (``SET NX PX``): True when taken; False when
        it is held, by anyone (``acquire`` then tells re-entry and take-over apart).
        ``quiet``: commands sent in the same write, whose replies nobody reads (the call's
        record: ``Recorder.take_quiet``)."""
        return self.runner.execute("SET", key, holder, NX, PX, ttl_bytes(ttl_ms), quiet=quiet) is not None

    def release(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        """Delete ``key`` if ``holder`` still has it; PUBLISH the key on ``notify`` if given.

        Returns False when the lock had expired or another holder has it (nothing deleted).
        """
        if notify is None:  # the usual case: the server's conditional delete, or the shorter script
            if self._delete is None:  # the server has none: the script, at once
                return bool(self.runner.run(RELEASE_EXACT, (key,), (holder,)) == 1)
            return bool(self._release_exact(key, holder) == 1)
        return bool(self.runner.run(RELEASE, (key,), (holder, "0", notify)) == 1)

    def _release_exact(self, key: str, holder: str) -> Any:
        """Delete ``key`` if it holds ``holder``: 1 deleted, 0 not. The server's own conditional
        delete where it has one, else the compare-and-delete script (``release_exact.lua``):
        the same answer either way."""
        delete = self._delete
        if delete is False:
            delete = self._ask_conditional_delete()
        if delete is not None:
            try:
                return self.runner.execute(*delete.args(key, holder))
            except ResponseError as error:
                if not conditional_delete.unavailable(error):
                    raise
                self._delete = None  # a server without it now (failover), or an ACL denying it
        return self.runner.run(RELEASE_EXACT, (key,), (holder,))

    def _ask_conditional_delete(self) -> ConditionalDelete | None:
        """Which conditional delete the server has, asked once (a connection error leaves it
        to the next release to ask)."""
        try:
            reply = self.runner.execute(*conditional_delete.QUESTION)
        except ResponseError:  # no COMMAND LIST (Redis 6.2), or an ACL denying it: the script
            reply = None
        delete = self._delete = conditional_delete.choose(reply)
        return delete

    def release_by_operator(self, key: str, holder: str, *, notify: str | None = None) -> bool:
        """Delete ``key`` if ``holder`` still has it, as an operator's release (the CLI's, the
        web page's): ``holder``, should it still run, is told at its next renewal and does not
        take the lock back. PUBLISH the key on ``notify`` if given."""
        reply = self.runner.run(
            RELEASE_BY_OPERATOR, (key, released_key(key)), (holder, notify or "", str(RELEASED_KEEP_MS))
        )
        return bool(reply == 1)

    def release_holder_prefix(self, key: str, prefix: str, *, notify: str | None = None) -> bool:
        """Delete ``key`` if its holder id starts with ``prefix``: how a parent process frees
        the lock of a child that died, knowing its task id and pid but not its full holder id."""
        return bool(self.runner.run(RELEASE, (key,), (prefix, "1", notify or "")) == 1)

    def transfer(self, key: str, holder: str, to: str, ttl_ms: int) -> bool:
        """Make ``to`` the holder of ``key`` (TTL ``ttl_ms``) if ``holder`` still has it: how
        an execution hands its lock to the next run of its task id."""
        return bool(self.runner.run(TRANSFER, (key,), (holder, to, ttl_arg(ttl_ms))) == 1)

    def holder_of(self, key: str) -> str | None:
        """The id holding ``key`` now, or None: for diagnostics, never for a decision."""
        value = self.client.get(key)
        return None if value is None else as_text(value)

    def holders(self, key: str) -> tuple[str, ...]:
        """The id holding ``key`` now, if any: what a release by holder prefix may then match
        (the delete itself compares on the server)."""
        holder = self.holder_of(key)
        return () if holder is None else (holder,)

    def _renew_batch(self, batch: Sequence[Lease]) -> RenewReport:
        calls = []
        for chunk in chunks(batch):
            keys: list[str] = []
            args: list[str] = []
            for lease in chunk:
                keys += (lease.key, released_key(lease.key))
                args += (lease.holder, ttl_arg(lease.ttl_ms))
            calls.append((keys, args))
        assert isinstance(self.client, redis.Redis)  # a cluster's engine overrides this
        return renew_report(batch, flatten(pipelined_scripts(self.client, RENEW, calls)))

    # -- many keys at once: listing and purging (the CLI) ------------------------------------

    def scan(self, match: str, count: int = SCAN_BATCH) -> Iterator[bytes | str]:
        """Every key matching the glob ``match``, SCAN ``count`` at a time (never KEYS, which
        blocks Redis); a key may come twice, as SCAN promises no more."""
        yield from self.client.scan_iter(match=match, count=count)

    def scan_batches(self, match: str, size: int = SCAN_BATCH) -> Iterator[list[bytes | str]]:
        """The keys :meth:`scan` finds, in lists of at most ``size``: one pipeline's worth each."""
        batch: list[bytes | str] = []
        for key in self.scan(match, size):
            batch.append(key)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch

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
            holder = as_text(value) if isinstance(value, (bytes, str)) and pttl != NO_KEY else None
            found.append(LockInfo(as_text(key), holder, pttl if isinstance(pttl, int) else NO_KEY))
        return found

    def fence_tokens(self, keys: Sequence[str]) -> list[int | None]:
        """The last fencing token issued for each lock key (None: none was, or its counter
        expired), in one pipeline. A fenced acquire's token is at least the server's time in
        microseconds then, so the token of the lock held now tells when it was taken."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.get(fence_key(key))
        replies = pipe.execute(raise_on_error=False)
        return [
            int(value) if isinstance(value, (bytes, str)) and value.isdigit() else None for value in replies
        ]

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

    def __init__(self, client: RedisCluster) -> None:
        super().__init__(client)
        # The release script, never the server's conditional delete: which one a cluster's
        # nodes have is not asked (the client would route the question to any one node).
        self._delete = None

    def renew_many(self, leases: Iterable[Lease]) -> RenewReport:
        report = RenewReport()
        failed: list[Lease] = []
        error: Exception | None = None
        for batch in self._partition(leases):
            try:
                report.merge(self._renew_batch(batch))
            except REDIS_ERRORS as exc:  # this node only: the others are still renewed
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
                args += (lease.key, released_key(lease.key), lease.holder, ttl_arg(lease.ttl_ms))
            calls.append(((), args))
        return renew_report(batch, flatten(pipelined_scripts(node_client, RENEW, calls)))

    def _node_of(self, key: str) -> Any:
        """The primary serving ``key``'s slot, as the client's slot map says."""
        return self.client.get_node_from_key(key)  # type: ignore[no-untyped-call]

    def scan(self, match: str, count: int = SCAN_BATCH) -> Iterator[bytes | str]:
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


def make_engine(client: Client, *, hold_connection: bool = False) -> LockEngine:
    """The engine for ``client``: a ClusterLockEngine for a RedisCluster. ``hold_connection``:
    a task's calls keep one connection of the client's pool (only for a client of the package's
    own, see ``ScriptRunner``)."""
    if isinstance(client, RedisCluster):
        return ClusterLockEngine(client)
    return LockEngine(client, hold_connection=hold_connection)
