"""Commands sent with another in its write whose replies nobody needs: packed after a
``CLIENT REPLY SKIP`` each, so the server sends none (no reply to read: no Python to parse it),
where the server takes ``CLIENT REPLY``; else pipelined, their replies read and dropped."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

__all__ = ["SKIP_NEXT_REPLY", "loud", "pipelined_with", "quiet_commands", "takes_reply_skip", "unpack_quiet"]


def takes_reply_skip(connection: Any) -> bool:
    """Whether the server of ``connection`` takes ``CLIENT REPLY`` (a proxy or an ACL may
    refuse it): asked by ``CLIENT REPLY ON``, which changes nothing and answers OK."""
    connection.send_packed_command(connection.pack_command("CLIENT", "REPLY", "ON"))
    try:
        return bool(connection.read_response() in (b"OK", "OK"))
    except ResponseError:
        return False


def loud(connection: Any, args: tuple[Any, ...], quiet: bytes) -> Any:
    """``args`` and the commands of ``quiet`` in one write on ``connection``, for a server that
    takes no ``CLIENT REPLY``: the reply of ``args``; every other read and dropped, so none is
    left for the next command to take."""
    commands = [args, *unpack_quiet(quiet)]
    connection.send_packed_command(connection.pack_commands(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(connection.read_response())
        except ResponseError as error:
            replies.append(error)
    if isinstance(replies[0], ResponseError):
        raise replies[0]
    return replies[0]


def pipelined_with(client: Any, args: tuple[Any, ...], quiet: bytes) -> Any:
    """``args`` and the commands of ``quiet`` in one pipeline of ``client`` (no transaction): the
    reply of ``args``; the others' read and dropped."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*args)
    for name, *rest in unpack_quiet(quiet):  # a name as str: a cluster routes commands by it
        pipe.execute_command(name.decode(), *rest)
    reply = pipe.execute(raise_on_error=False)[0]
    if isinstance(reply, Exception):
        raise reply
    return reply


#: What precedes each command of a ``quiet`` payload: the server sends no reply of the next one.
SKIP_NEXT_REPLY = b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n"


def quiet_commands(*commands: tuple[bytes, ...]) -> bytes:
    """``commands`` (each a tuple of bytes) packed as a ``quiet`` payload of
    :meth:`ScriptRunner.execute_with`: each one after a ``CLIENT REPLY SKIP``."""
    parts = []
    for command in commands:
        parts.append(SKIP_NEXT_REPLY + b"*%d\r\n" % len(command))
        parts += [b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command]
    return b"".join(parts)


def unpack_quiet(quiet: bytes) -> list[tuple[bytes, ...]]:
    """The commands of a ``quiet`` payload (:func:`quiet_commands`), without the skips."""
    commands = []
    at = 0
    while at < len(quiet):
        at += len(SKIP_NEXT_REPLY)
        end = quiet.index(b"\r\n", at)
        count = int(quiet[at + 1 : end])
        at = end + 2
        command = []
        for _ in range(count):
            end = quiet.index(b"\r\n", at)
            length = int(quiet[at + 1 : end])
            command.append(quiet[end + 2 : end + 2 + length])
            at = end + 2 + length + 2
        commands.append(tuple(command))
    return commands
