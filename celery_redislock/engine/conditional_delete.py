"""The server's own compare-and-delete, where it has one, for a task's release.

Valkey 9's ``DELIFEQ key value`` and Redis 8.4's ``DELEX key IFEQ value`` delete ``key`` only
if it holds exactly ``value`` and reply 1 or 0, as ``lua/release_exact.lua`` does, in one
command: no script call (the server's time in the call: about 0.25 µs against 1.6 to 1.9 for
the script's ``EVALSHA``, docs/benchmarks.md). Which one a server has is asked once a process
(``QUESTION``: a list of names, which parses the same in RESP2 and RESP3, where ``COMMAND
INFO`` replies with maps); a server without either, or without ``COMMAND LIST`` (Redis 6.2,
which has neither), keeps the script.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

__all__ = ["COMMANDS", "QUESTION", "ConditionalDelete", "choose", "unavailable"]


@dataclass(frozen=True)
class ConditionalDelete:
    """One server command that deletes a key only if it holds a given value."""

    #: The command's name, as ``COMMAND LIST`` spells it.
    name: str
    #: The words between the key and the value (``IFEQ`` for ``DELEX``).
    condition: tuple[str, ...]

    def args(self, key: str, value: str) -> tuple[str, ...]:
        """The command for ``key`` and ``value``, as arguments."""
        return (self.name.upper(), key, *self.condition, value)


#: What a server is asked for, in order of preference (a server has at most one of them).
COMMANDS = (
    ConditionalDelete("delifeq", ()),
    ConditionalDelete("delex", ("IFEQ",)),
)


#: The command that asks a server which of them it has: the names of its commands that start
#: with "del" (Redis 7.0 and later, Valkey). Spelt as redis-py takes it: "COMMAND LIST" in one
#: argument (its packer splits it) has no reply callback, where "COMMAND" has one that cannot
#: read this reply.
QUESTION = ("COMMAND LIST", "FILTERBY", "PATTERN", "del*")


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
