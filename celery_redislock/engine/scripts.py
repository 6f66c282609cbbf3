"""The Lua scripts and how they are sent: loaded once per process, a task's calls on a connection
of the client's pool, renewal batches cut into chunks pipelined in one round trip."""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import redis
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from . import conditional_delete
from .conditional_delete import ConditionalDelete
from .leases import Client, Lease, RenewReport, as_text
from .script_runner import package_script

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
    "PooledCalls",
    "chunks",
    "flatten",
    "load_script",
    "pipelined_scripts",
    "renew_report",
    "ttl_arg",
]


def load_script(name: str) -> str:
    return package_script(__package__, name)


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


class PooledCalls:
    """The calls every task makes (its acquire and release), on connections of the client's pool.

    Driven through redis-py's public ``Connection`` API (``send_command``, ``read_response``):
    the pool's connections only, so ``close()``, ``disconnect()``, re-authentication, health
    checks and whatever instruments the pool or its connections reach them. Not
    ``Redis.execute_command``, whose per-call wrapping (a retry closure, reply callbacks,
    operation metrics) costs a task more than the socket calls it makes; the client's
    ``Retry`` still applies, as ``execute_command`` applies it (once, at once, for the lock
    client). Replies are not put through redis-py's response callbacks: callers only test for
    None, or read script replies, which have none.

    ``hold``: keep one connection taken from the pool (still the pool's: counted, closed and
    disconnected with it) for the calls of whichever thread finds it free, where a connection
    taken and given back per call costs a task twice the Python of its two round trips. For a
    client the package made itself (a Celery app's lock client), never for a caller's, whose
    ``max_connections`` it would use up. A thread that finds it busy takes a connection from
    the pool for its call; a forked child forgets it (the parent's socket).
    """

    def __init__(self, client: redis.Redis, *, hold: bool = False) -> None:
        self._pool = client.connection_pool
        # redis-py < 5.3 takes a command name (unused by its pools); later ones warn if given one.
        self._name: tuple[str, ...] = ("EVALSHA",) if _takes_command_name(self._pool) else ()
        #: The server's own compare-and-delete (``conditional_delete``): False until the first
        #: release asks the server; None for none. A forked child keeps the answer (the same
        #: server); a server that stops taking it (failover, ACL) turns it to None.
        self._delete: ConditionalDelete | Literal[False] | None = False
        self._held: Any = None
        self._guard: threading.Lock | None = None
        if hold:
            self._guard = threading.Lock()
            _holding.add(self)

    @classmethod
    def for_client(cls, client: Client, *, hold: bool = False) -> PooledCalls | None:
        """One for ``client``; None for a cluster client (or one bound to a single connection),
        which keeps redis-py's own path."""
        if not isinstance(client, redis.Redis) or getattr(client, "connection", None) is not None:
            return None
        return cls(client, hold=hold)

    def execute(self, *args: Any) -> Any:
        """Send one command and read its reply; raises redis-py's errors."""
        guard = self._guard
        if guard is not None and guard.acquire(blocking=False):
            try:
                connection = self._held
                if connection is None:
                    connection = self._held = self._pool.get_connection(*self._name)
                return _call(connection, args, held=True)
            finally:
                guard.release()
        pool = self._pool
        connection = pool.get_connection(*self._name)
        try:
            return _call(connection, args)
        finally:
            pool.release(connection)

    def _forget_held(self) -> None:
        # In a forked child: the held connection's socket is the parent's; never written to.
        self._held = None
        self._guard = threading.Lock()

    def script(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """EVALSHA of ``script``; EVAL (which also caches it again) after a NOSCRIPT reply."""
        try:
            return self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.execute("EVAL", script.script, len(keys), *keys, *args)

    def release_exact(self, script: Script, key: str, holder: str) -> Any:
        """Delete ``key`` if it holds ``holder`` (a task's release): 1 deleted, 0 not. The
        server's own conditional delete where it has one, else ``script`` (the compare-and-
        delete script, ``release_exact.lua``): the same answer either way."""
        delete = self._delete
        if delete is False:
            delete = self._ask_conditional_delete()
        if delete is not None:
            try:
                return self.execute(*delete.args(key, holder))
            except ResponseError as error:
                if not conditional_delete.unavailable(error):
                    raise
                self._delete = None  # a server without it now (failover), or an ACL denying it
        return self.script(script, (key,), (holder,))

    def _ask_conditional_delete(self) -> ConditionalDelete | None:
        """Which conditional delete the server has, asked once (a connection error leaves it
        to the next release to ask)."""
        try:
            reply = self.execute(*conditional_delete.QUESTION)
        except ResponseError:  # no COMMAND LIST (Redis 6.2), or an ACL denying it: the script
            reply = None
        delete = self._delete = conditional_delete.choose(reply)
        return delete


#: The PooledCalls that hold a connection, for the fork hook below.
_holding: weakref.WeakSet[PooledCalls] = weakref.WeakSet()


def _forget_held_connections() -> None:
    for calls in list(_holding):
        calls._forget_held()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held_connections)


def _call(connection: Any, args: Sequence[Any], *, held: bool = False) -> Any:
    """``args`` sent on ``connection`` and its reply read; a failure goes to the client's
    ``Retry``, an interruption drops the connection (a reply left unread would be the next
    command's). ``held``: a connection kept between calls, which found its server gone (a
    restart, a failover) is made again once, at once, as the pool does for an idle one it hands
    out.

    ``connect()`` first, as the pool calls it on every connection it hands out: a no-op while
    connected; on a closed connection, the class's own way in (a Sentinel connection asks the
    Sentinels for the master there: ``send_command``'s reconnect would go back to the old one)."""
    try:
        connection.connect()
        connection.send_command(*args)
        return connection.read_response()
    except ResponseError:  # the server's answer: the connection is in order
        raise
    except Exception as error:
        if held and isinstance(error, (RedisConnectionError, OSError)):
            connection.disconnect()
            return _call(connection, args)
        return _retry(connection, args, error)
    except BaseException:
        _drop(connection)
        raise


def _retry(connection: Any, args: Sequence[Any], error: Exception) -> Any:
    """``args`` sent again as the client's ``Retry`` says, after a first attempt that raised
    ``error``. That attempt is made outside the ``Retry`` (its closures cost a task more than
    the call's own Python); its failure is handed to it as if its own first attempt had raised
    it: the same retries, backoff and errors."""
    first: list[Exception] = [error]

    def attempt() -> Any:
        if first:
            raise first.pop()
        connection.connect()
        connection.send_command(*args)
        return connection.read_response()

    try:
        return connection.retry.call_with_retry(attempt, lambda _error: connection.disconnect())
    except ResponseError:
        raise
    except BaseException:
        _drop(connection)
        raise


def _drop(connection: Any) -> None:
    """Disconnect ``connection`` after an interrupted call (a soft time limit, a failure): a
    reply left unread would be taken for the next command's."""
    connection.disconnect()


def _takes_command_name(pool: Any) -> bool:
    """Whether ``pool.get_connection`` requires a command name (redis-py before 5.3)."""
    try:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


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
#: lock, measured in docs/benchmarks.md), so a batch is cut into calls of at most this many,
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
