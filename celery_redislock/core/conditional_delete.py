"""The server's own compare-and-delete, where it has one, for a task's release.

Valkey 9's ``DELIFEQ key value`` and Redis 8.4's ``DELEX key IFEQ value`` delete ``key`` only
if it holds exactly ``value`` and reply 1 or 0, as ``lua/release_exact.lua`` does, in one
command: no script call (the server's time in the call: about 0.25 µs against 1.6 to 1.9 for
the script's ``EVALSHA``, README, Benchmarks). Which one a server has is asked once a process
(``QUESTION``: a list of names, which parses the same in RESP2 and RESP3, where ``COMMAND
INFO`` replies with maps); a server without either, or without ``COMMAND LIST`` (Redis 6.2,
which has neither), keeps the script.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from . import resp

__all__ = ["COMMANDS", "QUESTION", "QUESTION_PACKED", "ConditionalDelete", "choose", "unavailable"]


@dataclass(frozen=True)
class ConditionalDelete:
    """One server command that deletes a key only if it holds a given value."""

    #: The command's name, as ``COMMAND LIST`` spells it.
    name: str
    #: The words between the key and the value (``IFEQ`` for ``DELEX``).
    condition: tuple[str, ...]
    #: The request packed, with the key's and the value's lengths and bytes to fill in.
    template: bytes

    def request(self, key: bytes, value: bytes) -> bytes:
        """The command for ``key`` and ``value``, packed (RESP)."""
        return self.template % (len(key), key, len(value), value)

    def args(self, key: str, value: str) -> tuple[str, ...]:
        """The same command as arguments (for redis-py's path)."""
        return (self.name.upper(), key, *self.condition, value)


#: What a server is asked for, in order of preference (a server has at most one of them).
COMMANDS = (
    ConditionalDelete("delifeq", (), b"*3\r\n$7\r\nDELIFEQ\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"),
    ConditionalDelete("delex", ("IFEQ",), b"*4\r\n$5\r\nDELEX\r\n$%d\r\n%b\r\n$4\r\nIFEQ\r\n$%d\r\n%b\r\n"),
)


#: The command that asks a server which of them it has: the names of its commands that start
#: with "del" (Redis 7.0 and later, Valkey). Spelt as redis-py takes it: "COMMAND LIST" in one
#: argument (its packer splits it) has no reply callback, where "COMMAND" has one that cannot
#: read this reply.
QUESTION = ("COMMAND LIST", "FILTERBY", "PATTERN", "del*")
#: The same, packed (RESP), as the direct connection sends it.
QUESTION_PACKED = resp.pack((*QUESTION[0].split(), *QUESTION[1:]))


def choose(reply: Any) -> ConditionalDelete | None:
    """The first of ``COMMANDS`` a server has, from its reply to ``QUESTION``."""
    if not isinstance(reply, Sequence) or isinstance(reply, (bytes, str)):
        return None
    names = {_text(name) for name in reply}
    return next((command for command in COMMANDS if command.name in names), None)


def unavailable(error: ResponseError) -> bool:
    """Whether ``error``, a reply to a conditional delete, says this server will not run it (it
    does not know it: a failover to an older server; an ACL denies it): the script then."""
    return isinstance(error, NoPermissionError) or str(error).lower().startswith("unknown command")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace").lower() if isinstance(value, bytes) else str(value).lower()
