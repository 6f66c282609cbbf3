"""A call's record of decisions: where it lives, how a decision script writes its entry in the
same call (``lua/record.lua`` wraps the script), how the uncontended path writes its own (two
plain commands pipelined with its ``SET NX``), and how an entry reads back.

The record of a call is a Redis list, newest entry first, at most ``RECORD_LENGTH`` entries,
expiring ``ttl`` after its last write. Each entry is a JSON array ``[server ms, kind, the
script's reply, the caller's fields...]``; the kinds and their fields are the callers' (this
module names none but the uncontended path's ``take``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .keys import record_key
from .quiet_commands import SKIP_NEXT_REPLY, quiet_commands
from .script_runner import ScriptRunner, package_script
from .timing import to_ms, to_seconds

__all__ = [
    "COPY_DECISION",
    "LOCK_DECISION",
    "RECORD_LENGTH",
    "TAKE",
    "Entry",
    "Record",
    "Recorder",
    "parse_entry",
    "recorded_script",
    "run_recorded",
]

#: Entries a call's record keeps (``record.lua`` trims to it): the newest ones.
RECORD_LENGTH = 16

#: The kind of the uncontended path's entry: its ``SET NX`` took a free key (``record.lua``
#: drops it when the key was found held and the acquire script ran next).
TAKE = "take"

#: The kind of the acquire script's entry (``record.lua`` drops a ``take`` entry before it).
LOCK_DECISION = "lock"
#: The kind of a put-off call's copy's entry (``copy_token.lua``'s claim). The gates and the
#: modes name the kinds of their own decisions.
COPY_DECISION = "copy"

_WRAPPER = package_script(__package__, "record.lua")
_BODY = "-- BODY\n"


@functools.cache
def recorded_script(script: str) -> str:
    """``script`` wrapped by ``record.lua``: the same decision, its reply kept in the record."""
    head, tail = _WRAPPER.split(_BODY, 1)
    return f"{head}{script}\n{tail}"


@dataclass(frozen=True)
class Entry:
    """One decision: when (the server's clock, seconds since the epoch; None when unknown),
    its ``kind``, the deciding script's ``reply`` (strings, or a list of them; None for none)
    and the caller's ``fields``."""

    time: float | None
    kind: str
    reply: Any
    fields: tuple[str, ...]


def parse_entry(raw: bytes | str, now_ms: int | None = None, pttl_ms: int | None = None) -> Entry | None:
    """An entry as written; None for one that is not an entry (a value of another writer).

    An untimed entry (the uncontended path's, the newest) is timed by ``now_ms`` (the server's
    clock) and ``pttl_ms`` (the record's TTL left): it was written when the record was last
    given its TTL."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or len(value) < 3 or not isinstance(value[1], str):
        return None
    stamp, kind, reply, *fields = value
    if stamp == 0 and kind == TAKE:  # [0, "take", ttl ms, key]
        ttl = int(reply)
        stamp = None if now_ms is None or pttl_ms is None or pttl_ms < 0 else now_ms - ttl + pttl_ms
        reply = None
    when = None if stamp is None else to_seconds(int(stamp))
    return Entry(when, kind, reply, tuple(str(field) for field in fields))


class Recorder:
    """How one app records its calls' decisions: its key prefix and the records' TTL;
    ``cluster``: the record of a decision is named in the slot of the decision's keys (a
    script's keys must share a slot), so a call's record may be several keys, one per slot."""

    __slots__ = (
        "_entry_extra",
        "_plain",
        "_plain_names",
        "_record_extra",
        "_take_parts",
        "cluster",
        "prefix",
        "ttl_ms",
        "ttl_text",
    )

    def __init__(self, prefix: str, ttl: float, *, cluster: bool = False) -> None:
        self.prefix = prefix
        self.ttl_ms = to_ms(ttl)
        self.cluster = cluster
        self.ttl_text = str(self.ttl_ms)
        # No cluster, and a prefix with nothing to escape: the uncontended path's record is
        # packed by one formatting (take_quiet), its holes the task id (twice) and the key.
        self._plain = not cluster and _plain(prefix)
        #: Task name -> whether its keys are plain too (``_plain``).
        self._plain_names: dict[str, bool] = {}
        record = f"{{{prefix}:"  # then the task id, then "}:explain": record_key's form
        entry = f'[0,"{TAKE}",{self.ttl_text},"'  # then the key, then '"]'
        self._record_extra = len(record) + len("}:explain")
        self._entry_extra = len(entry) + 2
        skip = SKIP_NEXT_REPLY.decode()
        #: The fixed parts of the packed commands, between the holes (an f-string: a tenth of
        #: what % formatting costs).
        self._take_parts = (
            f"{skip}*3\r\n$5\r\nLPUSH\r\n$",
            record,
            entry,
            '"]\r\n',
            f"{skip}*3\r\n$7\r\nPEXPIRE\r\n$",
            f"${len(self.ttl_text)}\r\n{self.ttl_text}\r\n",
        )

    def key(self, task_id: str, beside: str) -> str:
        """The record of ``task_id`` that a decision on ``beside`` (its first key) writes to."""
        return record_key(self.prefix, task_id, beside if self.cluster else None)

    def record(self, task_id: str, kind: str, *fields: str) -> Record:
        """What a script call records: a ``kind`` decision on ``task_id`` with ``fields``."""
        return Record(self, task_id, kind, fields)

    def take_quiet(self, task_id: str, key: str, task_name: str) -> bytes:
        """The uncontended path's record, sent in the write of its ``SET NX`` with no reply to
        read (``ScriptRunner.execute``'s ``quiet``): an untimed ``take`` entry pushed on the record
        (timed when read, by the record's TTL left) and the record's TTL, each after a
        ``CLIENT REPLY SKIP``. Packed by hand, as :func:`quiet_commands.quiet_commands` packs (a
        test holds them equal), in one formatting where the names need no escaping and count
        their bytes as their characters (the usual case: it is a task's Python, every call)."""
        if (
            self._plain_names.get(task_name)
            and task_id.isascii()
            and "{" not in task_id
            and "}" not in task_id
        ):
            size = len(task_id) + self._record_extra
            lpush, record, entry, entry_end, pexpire, ttl = self._take_parts
            return (
                f"{lpush}{size}\r\n{record}{task_id}}}:explain\r\n${len(key) + self._entry_extra}\r\n"
                f"{entry}{key}{entry_end}{pexpire}{size}\r\n{record}{task_id}}}:explain\r\n{ttl}"
            ).encode()
        return self._take_slow(task_id, key, task_name)

    def _take_slow(self, task_id: str, key: str, task_name: str) -> bytes:
        """``take_quiet`` where a name needs escaping, or counts more bytes than characters
        (or the first time a task name is seen: whether its keys are plain is noted then)."""
        if task_name not in self._plain_names:
            self._plain_names[task_name] = self._plain and _plain(task_name)
            return self.take_quiet(task_id, key, task_name)
        record = record_key(self.prefix, task_id, key if self.cluster else None)
        entry = json.dumps([0, TAKE, self.ttl_ms, key], separators=(",", ":"))
        keep = self.ttl_text.encode()
        return quiet_commands(
            (b"LPUSH", record.encode(), entry.encode()), (b"PEXPIRE", record.encode(), keep)
        )


def _plain(text: str) -> bool:
    """Whether ``text`` is ASCII with nothing a JSON string or a hash tag would need escaped."""
    return text.isascii() and not any(char in text for char in '{}"\\')


@dataclass(frozen=True)
class Record:
    """A decision to keep in the record of ``task_id``, as a ``kind`` entry with ``fields``."""

    recorder: Recorder
    task_id: str
    kind: str
    fields: tuple[str, ...] = ()

    def script_call(
        self, script: str, keys: Sequence[str], args: Sequence[Any]
    ) -> tuple[str, list[str], list[Any]]:
        """``(script, keys, args)`` of ``script``'s call on ``keys`` with ``args``, recorded."""
        tail = [self.recorder.ttl_text, self.kind, *self.fields]
        return (
            recorded_script(script),
            [*keys, self.recorder.key(self.task_id, keys[0])],
            [*args, *tail, str(len(tail))],
        )

    def take_quiet(self, key: str, task_name: str) -> bytes:
        """The uncontended path's record (``Recorder.take_quiet``)."""
        return self.recorder.take_quiet(self.task_id, key, task_name)


def run_recorded(
    runner: ScriptRunner, script: str, keys: Sequence[str], args: Sequence[Any], record: Record | None
) -> Any:
    """``runner.run(script, keys, args)``, the decision kept in ``record`` too (None: not kept)."""
    if record is None:
        return runner.run(script, keys, args)
    return runner.run(*record.script_call(script, keys, args))
