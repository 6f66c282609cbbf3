"""How the engine's Redis calls are sent, the one way for every caller (the lock and semaphore
engines, the modes): a command, or a Lua script by EVALSHA with EVAL after a NOSCRIPT reply;
many script calls pipelined in one round trip.

Speed when nobody is watching, traceability when someone is: on a connection the runner holds,
a call is packed, sent and read through redis-py's public ``Connection`` API while
``Redis.execute_command`` is redis-py's own; once something wraps it (OpenTelemetry's redis
instrumentation, any other patcher), every call goes through the client's ``execute_command``,
where the wrapper sees it. Either way the client's ``Retry`` and response callbacks apply.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import threading
import weakref
from collections.abc import Sequence
from importlib import resources
from types import FunctionType
from typing import Any

import redis
from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .leases import Client
from .quiet_commands import loud as _loud
from .quiet_commands import pipelined_with, takes_reply_skip

__all__ = [
    "NX",
    "PX",
    "ScriptRunner",
    "batched_scripts",
    "is_redis_pys_own",
    "package_script",
    "pipelined_scripts",
    "sha_of",
]

#: Arguments that never change are given as bytes, which redis-py's encoder passes on as they
#: are (a str or an int it converts on every call): the same bytes on the wire. Never a
#: command's name: its response callback is looked up by it, and a wrapper of
#: ``execute_command`` (OpenTelemetry's) names its span after it.
NX, PX = b"NX", b"PX"
#: A script call's count of keys, as bytes (a cluster client reads it with ``int()`` as well).
_NUMKEYS = tuple(str(n).encode() for n in range(16))


def package_script(package: str, name: str) -> str:
    """The Lua source ``lua/{name}`` of ``package`` (a mode's own scripts live beside it)."""
    return resources.files(package).joinpath("lua").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def sha_of(script: str) -> str:
    """The SHA1 Redis knows ``script`` by (as redis-py's ``Script`` computes it), once each."""
    return hashlib.sha1(script.encode("utf-8")).hexdigest()


@functools.cache
def _sha_bytes(script: str) -> bytes:
    return sha_of(script).encode()


#: The code of redis-py's own ``Redis.execute_command`` (under any wrapper already set when this
#: module is imported): a class attribute that is another function, or no function at all (a
#: wrapt proxy, as OpenTelemetry sets), has been wrapped.
_OWN_EXECUTE = inspect.unwrap(redis.Redis.execute_command).__code__

#: A command whose response callback is not looked up yet (None: it has none).
_UNKNOWN = object()

#: Whether connections may ask to be reconnected after a reply (redis-py 8's maintenance
#: notifications: ``should_reconnect``); redis-py 5 has no such request.
_RECONNECTS = hasattr(AbstractConnection, "should_reconnect")


def is_redis_pys_own(execute_command: object) -> bool:
    """True when ``execute_command`` (a client class's) is redis-py's, wrapped by nobody."""
    return type(execute_command) is FunctionType and execute_command.__code__ is _OWN_EXECUTE


def _observed() -> bool:
    """True when redis-py's own metrics are on (redis-py 8's ``redis.observability``): they are
    recorded inside ``execute_command`` only."""
    try:
        from redis.observability import get_observability_instance
    except ImportError:  # redis-py before 8: none
        return False
    return bool(get_observability_instance().is_enabled())


class ScriptRunner:
    """Runs commands and scripts on one client; a script is known by its source (no registration:
    a mode brings its own and nothing here names it), every key of a call in one cluster slot
    (the caller names them by ``keys.slot_key``).

    ``hold``: the calls go through a client of the same pool bound to one connection
    (``client.client()``), taken on first use and kept, for whichever thread finds it free: a
    connection taken from the pool and given back per call costs a task more Python than the
    call itself (the pool's checks and bookkeeping, twice a call). Still the pool's connection:
    counted, closed and disconnected with it. For a client the package made itself (a Celery
    app's lock client), never for a caller's, whose ``max_connections`` it would use up. A
    thread that finds it busy goes through the pool; a forked child forgets it (the parent's
    socket).

    On the held connection, while the client class's ``execute_command`` is redis-py's own
    (checked each call: one attribute and one identity compare), a call is sent by ``Connection.pack_command``/``send_packed_command`` and read by
    ``read_response``: ``execute_command``'s own wrapping (observability, retry closures,
    connection hand-offs) costs a call more Python than packing and parsing it. Else, and on
    any connection taken per call, through ``execute_command``.
    """

    def __init__(self, client: Client, *, hold: bool = False) -> None:
        self.client = client
        self._guard: threading.Lock | None = None
        self._held: redis.Redis | None = None
        #: Whether the held connection's last call went through: a call that then finds it dead
        #: (a restart, a failover) is sent again once, at once, as the pool does with an idle
        #: connection it finds closed; not when its server is down (that call failed already).
        self._held_ok = False
        #: The client class, and its ``execute_command`` last found to be redis-py's own (None:
        #: wrapped, or not judged yet): what each held call compares with.
        self._kind = type(client)
        self._own: object = None
        #: The held connection when it may be used directly (``_take`` judges it), else None;
        #: the held client's response callbacks by command name, as looked up (its own: no
        #: caller can change them), a plain dict's lookup where the client's is a method.
        self._direct: Any = None
        self._callbacks: dict[Any, Any] = {}
        #: Whether the held connection's server takes ``CLIENT REPLY SKIP`` (None: not asked
        #: yet; asked again whenever the connection is given back or reconnects).
        self._quiet: bool | None = None
        if hold and isinstance(client, redis.Redis) and client.connection is None:
            self._guard = threading.Lock()
            _holding.add(self)

    def execute(self, *args: Any, quiet: bytes = b"") -> Any:
        """Send one command and read its reply (redis-py's response callbacks applied); raises
        redis-py's errors.

        ``quiet``: packed commands (``quiet_commands``) sent in the same write, whose replies
        nobody needs: on the held connection of a server that takes ``CLIENT REPLY SKIP``
        (asked once a connection) sent as they are, the server sending no reply of them to
        read; elsewhere pipelined with ``args``, their replies read and dropped."""
        guard = self._guard
        if guard is None or not guard.acquire(False):  # positional: a keyword costs a dict
            return self._pooled(args, quiet)
        try:
            held = self._held
            if held is None:
                held = self._take()
            connection = self._direct
            try:
                if connection is not None and (self._kind.execute_command is self._own or self._judge()):
                    # As execute_command would: the client's Retry after a connection error,
                    # a reconnect when the server asked for one (redis-py 8's maintenance
                    # notifications, read with the reply), the response callback.
                    try:
                        if quiet and not (
                            self._quiet or (self._quiet is None and self._ask_quiet(connection))
                        ):
                            reply = _loud(connection, args, quiet)
                        else:
                            packed = connection.pack_command(*args)
                            if quiet:
                                packed.append(quiet)  # the same write: no round trip quiet
                            connection.send_packed_command(packed)
                            reply = connection.read_response()
                    except (RedisConnectionError, RedisTimeoutError) as error:
                        reply = self._retried(connection, args, quiet, error)
                    if _RECONNECTS and connection.should_reconnect():
                        connection.disconnect()
                        connection.connect()
                    name = args[0]
                    callback = self._callbacks.get(name, _UNKNOWN)
                    if callback is _UNKNOWN:
                        callback = self._callbacks[name] = held.response_callbacks.get(name)  # type: ignore[no-untyped-call]
                    if callback is not None:
                        reply = callback(reply)
                elif quiet:
                    reply = pipelined_with(held, args, quiet)
                else:
                    reply = held.execute_command(*args)  # type: ignore[no-untyped-call]
            except ResponseError:
                # The server's answer: the connection is in order, unless commands went quiet on
                # it. A server that stopped taking CLIENT REPLY (an ACL changed) answers a refused
                # skip and the command after it, replies a later command would take for its own
                # (a held key read as taken): the connection is dropped with them.
                if self._quiet:
                    self._give_back(held)
                raise
            except RedisConnectionError:
                # Given back, and this call sent again through the pool, which connects its
                # own way (a Sentinel's asks the Sentinels for the master, where a reconnect
                # of the held one's own would go back to the old one).
                self._give_back(held)
                if not self._held_ok:
                    raise
                self._held_ok = False
                return self._pooled(args, quiet)
            except BaseException:
                # Interrupted (a soft time limit) between sending and reading: a reply left
                # unread would be taken for the next command's.
                self._give_back(held)
                raise
            self._held_ok = True
            return reply
        finally:
            guard.release()

    def _ask_quiet(self, connection: Any) -> bool:
        """Whether the held ``connection``'s server takes ``CLIENT REPLY SKIP``: asked once a
        connection (a command more, the first time only), remembered until it is given back
        or reconnects."""
        takes = self._quiet = takes_reply_skip(connection)
        return takes

    def _retried(self, connection: Any, args: tuple[Any, ...], quiet: bytes, error: Exception) -> Any:
        """What ``execute_command`` does after a connection error: the connection's ``Retry``
        (the client's) decides, ``error`` counted as its first failure, the connection
        disconnected after each failure (the next attempt connects again, and asks again
        whether the server takes ``CLIENT REPLY SKIP``)."""
        failed = [error]

        def attempt() -> Any:
            if failed:
                raise failed.pop()
            if quiet:  # asked again: the connection is a new one
                return _loud(connection, args, quiet)
            connection.send_packed_command(connection.pack_command(*args))
            return connection.read_response()

        def disconnect(_error: Exception) -> None:
            self._quiet = None
            connection.disconnect()

        return connection.retry.call_with_retry(attempt, disconnect)

    def run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The reply of ``script`` (its Lua source) run on ``keys`` (all of one slot) with
        ``args``: EVALSHA, and EVAL (which also caches it again) after a NOSCRIPT reply."""
        count = len(keys)
        try:
            return self.execute(
                "EVALSHA", _sha_bytes(script), _NUMKEYS[count] if count < 16 else count, *keys, *args
            )
        except NoScriptError:
            return self.execute("EVAL", script, len(keys), *keys, *args)

    def _take(self) -> redis.Redis:
        """The held client, taken from the pool now; whether its connection may be used
        directly: a connection of redis-py's own kinds (not a client-side cache's proxy, which
        keeps its cache inside ``send_command``), with redis-py's own metrics off (recorded
        inside ``execute_command`` only)."""
        held: redis.Redis = self.client.client()  # type: ignore[union-attr]
        self._held = held
        direct = isinstance(held.connection, AbstractConnection) and not _observed()
        self._direct = held.connection if direct else None
        return held

    def _judge(self) -> bool:
        """Whether the client class's ``execute_command`` is redis-py's own now (remembered,
        so the next call's check is one identity compare)."""
        execute_command = self._kind.execute_command
        own = is_redis_pys_own(execute_command)
        self._own = execute_command if own else None
        return own

    def _pooled(self, args: tuple[Any, ...], more: bytes = b"") -> Any:
        """``args`` (and ``more``) sent on a connection the client takes for the call (from its
        pool; a cluster client's pipeline sends commands of one slot to its node at once)."""
        try:
            if more:
                return pipelined_with(self.client, args, more)
            return self.client.execute_command(*args)  # type: ignore[no-untyped-call]
        except RedisError:  # the server's answer, or a connection redis-py has dropped
            raise
        except BaseException:
            # Interrupted (a soft time limit) between sending and reading: the connection went
            # back to the pool with its reply unread, which a pool with maintenance
            # notifications (RESP3) hands out again unchecked. Its idle connections go instead.
            pool = getattr(self.client, "connection_pool", None)
            if pool is not None:
                pool.disconnect(inuse_connections=False)
            raise

    def _give_back(self, held: redis.Redis) -> None:
        """Disconnect the held connection and give it back to the pool."""
        self._held = self._direct = self._quiet = None
        if held.connection is not None:
            held.connection.disconnect()  # type: ignore[no-untyped-call]
        held.close()

    def _forget_held(self) -> None:
        # In a forked child: the held connection's socket is the parent's; never written to.
        self._held = self._direct = self._quiet = None
        self._held_ok = False
        self._guard = threading.Lock()


#: The runners that hold a connection, for the fork hook below.
_holding: weakref.WeakSet[ScriptRunner] = weakref.WeakSet()


def _forget_held_connections() -> None:
    for runner in list(_holding):
        runner._forget_held()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held_connections)


def pipelined_scripts(
    client: redis.Redis, script: str, calls: Sequence[tuple[Sequence[str], Sequence[str]]]
) -> list[Any]:
    """The replies of ``script`` called once per ``(keys, args)``, all EVALSHAs in one pipeline
    (one round trip). Calls answered NOSCRIPT (a restarted Redis) are sent again once the
    script is loaded; any other error is raised."""
    replies: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    sha = sha_of(script)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for index in pending:
            keys, args = calls[index]
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
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
        client.script_load(script)
        pending = missing
    return replies


def batched_scripts(
    runner: ScriptRunner, script: str, calls: Sequence[tuple[Sequence[str], Sequence[str]]]
) -> list[Any]:
    """The replies of ``script`` called once per ``(keys, args)`` (each call's keys in one slot),
    in as few round trips as the client allows: one pipeline on a Redis server; on a cluster,
    one pipeline per node, to the node of each call's keys (a cluster pipeline refuses EVALSHA,
    a node's own client does not). A node's calls that fail there (a slot moved since the client
    learnt the map) are sent again one by one through the cluster client, which follows them."""
    client = runner.client
    if isinstance(client, redis.Redis):
        return pipelined_scripts(client, script, calls)
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for index, (keys, _) in enumerate(calls):
        node = client.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
        by_node.setdefault(node.name, (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    for node, indexes in by_node.values():
        try:
            found = pipelined_scripts(client.get_redis_connection(node), script, [calls[i] for i in indexes])
        except RedisError:
            found = [runner.run(script, *calls[i]) for i in indexes]
        for index, reply in zip(indexes, found):
            replies[index] = reply
    return replies
