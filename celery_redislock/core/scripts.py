"""The Lua scripts and how they are sent: loaded once per process, one direct connection per
process for the hot path, renewal batches cut into chunks pipelined in one round trip."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from typing import Any, Literal

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from . import conditional_delete, resp
from .conditional_delete import ConditionalDelete
from .leases import Client, Lease, RenewReport, as_text
from .process import pid

__all__ = [
    "ACQUIRE",
    "RELEASE",
    "RELEASE_EXACT",
    "RENEW",
    "RENEW_CHUNK",
    "SEM_ACQUIRE",
    "SEM_RELEASE",
    "SEM_RENEW",
    "SEM_STATE",
    "TRANSFER",
    "BatchRenewal",
    "DirectConnection",
    "chunks",
    "flatten",
    "load_script",
    "pipelined_scripts",
    "renew_report",
    "ttl_arg",
]


def load_script(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(name).read_text(encoding="utf-8")


# Read once per process; each engine registers them on its client (EVALSHA, NOSCRIPT fallback).
ACQUIRE = load_script("acquire.lua")
RELEASE = load_script("release.lua")
RELEASE_EXACT = load_script("release_exact.lua")
RENEW = load_script("renew.lua")
TRANSFER = load_script("transfer.lua")
SEM_ACQUIRE = load_script("sem_acquire.lua")
SEM_RELEASE = load_script("sem_release.lua")
SEM_RENEW = load_script("sem_renew.lua")
SEM_STATE = load_script("sem_state.lua")


#: Connections whose socket the hot path may talk on itself (``resp.call``): a TCP, TLS or unix
#: socket and nothing more. A subclass (a Sentinel-managed connection, which must drop a
#: demoted master at its first READONLY reply, or a user's own) keeps redis-py's path.
_RAW_CONNECTIONS = frozenset({redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection})


class DirectConnection:
    """A connection of this process's own to the lock's Redis, for the calls every task makes.

    redis-py's ``Redis.execute_command`` costs about three times the socket calls it makes
    (pool checkout and return, argument-deprecation wrappers, observability hooks, a retry
    closure: about 30 µs of CPU against 12 µs for a PING sent on a connection directly,
    measured in README, Benchmarks). A task's acquire and release go through this instead:
    one connection made by the client's own pool (same host, credentials, timeouts, retry
    policy; a Sentinel pool's connection finds the master itself), commands sent and read on it
    directly, retried as the client would (its ``Retry``: once, at once, for the lock client).
    The two commands of every task come packed already (``send``: ``resp.set_nx_px``,
    ``resp.evalsha``), from a template, not through the generic packer.

    Thread-safe without making threads wait: a thread that finds the connection in use (the
    renewal thread, another thread of a threads or gevent pool) takes the pool's path instead.
    A forked child makes its own: the parent's socket is never used from two processes.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        #: How this client encodes str arguments (what a packed request must use too).
        self.encoding: str = client.get_encoder().encoding
        # (pid, mutex, connection): replaced whole in a forked child. The connection is made
        # with it (redis-py connects it on its first command), so a command looks nothing up.
        self._state: tuple[int, threading.Lock, Any] | None = None
        #: The server's own compare-and-delete (``conditional_delete``): False until the first
        #: release asks the server; None for none. A forked child keeps the answer (the same
        #: server); a server that stops taking it (failover, ACL) turns it to None.
        self._delete: ConditionalDelete | Literal[False] | None = False

    @classmethod
    def for_client(cls, client: Client) -> DirectConnection | None:
        """One for ``client``; None for a cluster client (or one bound to a single connection),
        which keeps redis-py's own path."""
        if not isinstance(client, redis.Redis) or getattr(client, "connection", None) is not None:
            return None
        return cls(client)

    def connection(self) -> Any:
        """This process's connection (made on first use, connected on first command)."""
        return self._own()[2]

    def execute(self, *args: Any) -> Any:
        """Send one command and read its reply; raises redis-py's errors. The reply is not put
        through redis-py's response callbacks (a SET that took the key gives ``b"OK"``, or
        ``True`` when the pool's path served it): callers only test for None, or read script
        replies, which have no callback."""
        return self.send(None, args)

    def send(self, request: bytes | None, args: Sequence[Any]) -> Any:
        """``execute(*args)``, with ``request`` the command packed already (in
        ``self.encoding``), or None to pack ``args``; a connection that is not a raw socket's,
        or a thread that finds this one busy, sends ``args`` through redis-py."""
        state = self._state  # self._own(), written out: a call less on every command
        if state is None or state[0] != pid():
            state = self._own()
        _, mutex, connection = state
        if not mutex.acquire(False):
            # In use by another thread: the pool has connections to spare.
            return self._client.execute_command(*args)  # type: ignore[no-untyped-call]
        try:
            try:
                return _send(connection, request, args)
            except Exception as error:
                # The first attempt is made outside the client's Retry (its closures cost a
                # task more than the socket calls' Python); a failure is handed to it as if
                # its own first attempt had raised it: the same retries, backoff and errors.
                first: list[Exception] = [error]

                def attempt() -> Any:
                    if first:
                        raise first.pop()
                    return _send(connection, request, args)

                return connection.retry.call_with_retry(attempt, lambda _error: connection.disconnect())
        finally:
            mutex.release()

    def script(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """EVALSHA of ``script``; EVAL (which also caches it again) after a NOSCRIPT reply."""
        if len(keys) == 1 and len(args) == 1:
            return self.script_1_1(script, keys[0], args[0])
        try:
            return self.send(None, ("EVALSHA", script.sha, len(keys), *keys, *args))
        except NoScriptError:
            return self.execute("EVAL", script.script, len(keys), *keys, *args)

    def script_1_1(self, script: Script, key: str, arg: str) -> Any:
        """``script`` on one key with one argument (a task's release), packed from its
        template (``resp.evalsha``); EVAL after a NOSCRIPT reply, as ``script``."""
        encoding = self.encoding
        request = resp.evalsha(script.sha, key.encode(encoding), arg.encode(encoding))
        try:
            return self.send(request, ("EVALSHA", script.sha, 1, key, arg))
        except NoScriptError:
            return self.execute("EVAL", script.script, 1, key, arg)

    def release_exact(self, script: Script, key: str, holder: str) -> Any:
        """Delete ``key`` if it holds ``holder`` (a task's release): 1 deleted, 0 not. The
        server's own conditional delete where it has one, else ``script`` (the compare-and-
        delete script, ``release_exact.lua``): the same answer either way."""
        delete = self._delete
        if delete is False:
            delete = self._ask_conditional_delete()
        if delete is not None:
            encoding = self.encoding
            request = delete.request(key.encode(encoding), holder.encode(encoding))
            try:
                return self.send(request, delete.args(key, holder))
            except ResponseError as error:
                if not conditional_delete.unavailable(error):
                    raise
                self._delete = None  # a server without it now (failover), or an ACL denying it
        return self.script_1_1(script, key, holder)

    def _ask_conditional_delete(self) -> ConditionalDelete | None:
        """Which conditional delete the server has, asked once (a connection error leaves it
        to the next release to ask)."""
        try:
            reply = self.send(conditional_delete.QUESTION_PACKED, conditional_delete.QUESTION)
        except ResponseError:  # no COMMAND LIST (Redis 6.2), or an ACL denying it: the script
            reply = None
        delete = self._delete = conditional_delete.choose(reply)
        return delete

    def _own(self) -> tuple[int, threading.Lock, Any]:
        """This process's state: a forked child makes its own."""
        state = self._state
        if state is None or state[0] != pid():
            connection = self._client.connection_pool.make_connection()
            state = self._state = (pid(), threading.Lock(), connection)
        return state


def _send(connection: Any, request: bytes | None, args: Sequence[Any]) -> Any:
    if type(connection) in _RAW_CONNECTIONS:
        if connection._sock is None:
            connection.connect()
        # As redis-py does before a command: a connection idle longer than its health
        # check interval is PINGed first (a stale one reconnects before the real call).
        interval = connection.health_check_interval
        now = time.monotonic() if interval else 0.0
        if interval and now > connection.next_health_check:
            connection.check_health()
        if request is None:
            request = resp.pack(args, connection.encoder.encoding)
        if resp.KERNEL_TIMEOUTS and connection._sock.gettimeout() is not None:
            resp.kernel_timeouts(connection._sock)  # a new socket: its timeout to the kernel
        reply = resp.call(connection, request)
        if interval:
            # Counted from before the call (one clock read a command, not two): the next
            # check comes at most one round trip early.
            connection.next_health_check = now + interval
        return reply
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


def renew_report(batch: Sequence[Lease], replies: Any) -> RenewReport:
    report = RenewReport()
    for lease, reply in zip(batch, replies):
        if reply == 1:
            report.renewed.append(lease)
        elif reply == 2:
            report.retaken.append(lease)
        else:
            report.stolen.append((lease, as_text(reply)))
    return report


def flatten(replies: Sequence[Any]) -> list[Any]:
    """The per-lease replies of several renewal calls, in order."""
    return [reply for call in replies for reply in call]


def ttl_arg(ttl_ms: int) -> str:
    if ttl_ms <= 0:
        raise ValueError(f"lock TTL must be a positive number of milliseconds, got {ttl_ms}")
    return str(int(ttl_ms))
