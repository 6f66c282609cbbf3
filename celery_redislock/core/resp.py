"""One command on a raw socket: the request packed and the reply read without redis-py's
command path.

A task's acquire and release are one command each, on a connection this process keeps to
itself (``scripts.DirectConnection``). Through redis-py's ``Connection.send_command`` and
``read_response`` they cost 55 µs of CPU a task in packing (its encoder per argument) and in
its parser's buffer classes; packed and parsed here, 6 µs (README, Benchmarks). Only what
those calls can answer is parsed (RESP2 and RESP3 scalars, nulls and arrays); anything else
(a server push, an unknown type) makes the connection be dropped after the reply, so the
next call starts clean.

Errors are redis-py's: a reply error becomes its exception class (NOSCRIPT a
``NoScriptError``, ...), a socket that fails or times out a ``ConnectionError`` or
``TimeoutError``, with the connection disconnected, as redis-py's own path does. The
connection is disconnected too when anything else interrupts the call (a soft time limit):
a reply left unread would be taken for the next command's.
"""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Sequence
from typing import Any

from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError, TimeoutError

__all__ = ["KERNEL_TIMEOUTS", "call", "evalsha", "kernel_timeouts", "pack", "set_nx_px"]

_CRLF = b"\r\n"
# The replies of a task's two commands, as whole reads: SET NX took the key / found it held,
# the release deleted it / did not (RESP2 and RESP3 spellings).
_WHOLE: dict[bytes, Any] = {b"+OK\r\n": b"OK", b"$-1\r\n": None, b"_\r\n": None, b":1\r\n": 1, b":0\r\n": 0}
_READ_SIZE = 65536


#: Whether ``kernel_timeouts`` can move a socket's timeout into the kernel here: Linux, where
#: ``SO_RCVTIMEO`` takes a ``struct timeval`` of two longs.
KERNEL_TIMEOUTS = sys.platform == "linux" and struct.calcsize("l") == 8


def kernel_timeouts(sock: socket.socket) -> None:
    """Make ``sock``'s timeout (Python's, as redis-py set it) the kernel's instead.

    A Python socket with a timeout asks ``poll()`` before every ``send`` and ``recv``: a
    system call more each, four a task for a lock's two round trips. A blocking socket whose
    ``SO_RCVTIMEO`` and ``SO_SNDTIMEO`` say the same timeout makes the kernel time each call
    out instead (``call`` reads that as a ``TimeoutError``, as before). Only for a plain TCP or
    unix socket: a TLS socket keeps Python's timeout, and so does a cooperative one (gevent's,
    eventlet's: its descriptor stays non-blocking, where the kernel's timeout never applies).
    Harmless when redis-py sets its own timeout again later (its reads with a timeout of their
    own do): both then apply, and the next ``call`` moves it again."""
    timeout = sock.gettimeout()
    # Not a timeout the kernel can keep: none, or 0 (non-blocking: a zero timeval would mean
    # "wait forever" there). Nor the standard library's socket.
    if not timeout or type(sock).__module__ != "socket":
        return
    seconds, micros = divmod(max(1, round(timeout * 1_000_000)), 1_000_000)
    timeval = struct.pack("ll", seconds, micros)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.settimeout(None)


class _Incomplete(Exception):
    """The buffer ends before the reply does: read more."""


class _Unexpected(Exception):
    """A reply of a type this module does not parse."""


def pack(args: Sequence[str | bytes | int], encoding: str = "utf-8") -> bytes:
    """``args`` as one RESP request (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            data = arg.encode(encoding)
        elif isinstance(arg, bytes):
            data = arg
        else:
            data = b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


_SET_NX_PX = b"*6\r\n$3\r\nSET\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%d\r\n%b\r\n"
_EVALSHA_1_1 = b"*5\r\n$7\r\nEVALSHA\r\n$%d\r\n%b\r\n$1\r\n1\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"


def set_nx_px(key: bytes, value: bytes, ttl_ms: bytes) -> bytes:
    """``SET key value NX PX ttl_ms`` packed: what ``pack`` gives, from one template (a task's
    acquire; a fifth of the generic packer's time)."""
    return _SET_NX_PX % (len(key), key, len(value), value, len(ttl_ms), ttl_ms)


def evalsha(sha: str, key: bytes, arg: bytes) -> bytes:
    """``EVALSHA sha 1 key arg`` packed (a task's release), as ``set_nx_px``."""
    return _EVALSHA_1_1 % (len(sha), sha.encode("ascii"), len(key), key, len(arg), arg)


def call(connection: Any, request: bytes) -> Any:
    """Send ``request`` on ``connection`` (a connected redis-py ``Connection``) and return its
    reply: bytes, int, None, a list of these; raises a reply error as redis-py does."""
    sock = connection._sock
    dirty = False
    try:
        sock.sendall(request)
        buffer = sock.recv(_READ_SIZE)
        reply = _WHOLE.get(buffer, _WHOLE)
        if reply is not _WHOLE:  # a task's own replies, read whole: no parsing
            return reply
        while True:
            if not buffer:
                raise ConnectionError("Connection closed by server.")
            try:
                reply, end = _parse(buffer, 0)
            except _Incomplete:
                buffer += sock.recv(_READ_SIZE)
                continue
            if not isinstance(reply, _Push):
                break
            dirty = True  # a push (RESP3): not ours to handle; the reply follows it
            buffer = buffer[end:] or sock.recv(_READ_SIZE)
        if end != len(buffer):
            dirty = True  # more than one reply: never ours, start the next call clean
    except (socket.timeout, BlockingIOError):  # Python's timeout, or the kernel's
        connection.disconnect()
        raise TimeoutError(f"Timeout reading from {_where(connection)}") from None
    except _Unexpected as exc:
        connection.disconnect()
        raise ConnectionError(f"Unexpected reply from {_where(connection)}: {exc}") from None
    except OSError as exc:
        connection.disconnect()
        raise ConnectionError(f"Error while talking to {_where(connection)}: {exc}") from None
    except BaseException:
        connection.disconnect()
        raise
    if dirty:
        connection.disconnect()
    if isinstance(reply, Exception):
        raise reply
    return reply


class _Push(list[Any]):
    """A RESP3 push message: not a reply to the command sent."""


def _parse(buffer: bytes, start: int) -> tuple[Any, int]:
    """The reply starting at ``start`` in ``buffer``, and where it ends."""
    eol = buffer.find(_CRLF, start)
    if eol < 0:
        raise _Incomplete
    kind, line, after = buffer[start : start + 1], buffer[start + 1 : eol], eol + 2
    if kind == b"+":
        return line, after
    if kind == b":":
        return int(line), after
    if kind == b"$" or kind == b"=":
        size = int(line)
        if size < 0:
            return None, after
        if len(buffer) < after + size + 2:
            raise _Incomplete
        data = buffer[after : after + size]
        return (data[4:] if kind == b"=" else data), after + size + 2  # "=": "txt:" prefix
    if kind == b"-":
        return BaseParser.parse_error(line.decode("utf-8", "replace")), after  # type: ignore[no-untyped-call]
    if kind == b"_":
        return None, after
    if kind == b"*" or kind == b">" or kind == b"~":
        count = int(line)
        if count < 0:
            return None, after
        items: list[Any] = _Push() if kind == b">" else []
        for _ in range(count):
            item, after = _parse(buffer, after)
            items.append(item)
        return items, after
    if kind == b"#":
        return line == b"t", after
    if kind == b",":
        return float(line), after
    if kind == b"(":
        return int(line), after
    raise _Unexpected(repr(buffer[start : start + 40]))


def _where(connection: Any) -> str:
    try:
        return str(connection._host_error())
    except Exception:  # an older redis-py: no such helper
        return "Redis"
