"""Key grammar: a lock key ``{prefix}:{task}:{digest}``, the keys named in its cluster slot (its
fence, a semaphore's queue, a mode's), and the channel its releases are published on."""

from __future__ import annotations

import re

__all__ = [
    "DIGEST_LENGTH",
    "copy_key",
    "fair_keys",
    "fair_load_glob",
    "fair_marks_key",
    "fair_queue_of",
    "fence_key",
    "format_key",
    "glob_escape",
    "grant_member",
    "holds_key",
    "limit_keys",
    "parse_key",
    "rate_keys",
    "rate_limiter_key",
    "rate_overrides_key",
    "record_glob",
    "record_key",
    "release_channel",
    "released_key",
    "reservation_member",
    "semaphore_keys",
    "slot_key",
    "slot_key_owner",
    "unit_member",
    "untaggable",
]

#: Hex digits of the digest that ends a lock key.
DIGEST_LENGTH = 32

_HEX = frozenset("0123456789abcdef")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def format_key(prefix: str, task_name: str, digest: str) -> str:
    """Return the Redis key of a lock: ``{prefix}:{task_name}:{digest}``."""
    return f"{prefix}:{task_name}:{digest}"


def parse_key(key: str) -> tuple[str, str, str]:
    """Split a key made by :func:`format_key` into ``(prefix, task_name, digest)``.

    The prefix may contain ``:``, the task name may not. Raises ``ValueError`` naming the key.
    """
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not all(parts) or len(parts[2]) != DIGEST_LENGTH or not _HEX.issuperset(parts[2]):
        raise ValueError(f"{key!r} is not a lock key of the form '<prefix>:<task name>:<digest>'")
    return parts[0], parts[1], parts[2]


def release_channel(key: str) -> str:
    """The PUBSUB channel a release of ``key`` is published on, for waiters."""
    return f"{key}:released"


def _hash_tag(key: str) -> str | None:
    # Redis Cluster's rule: the text between the first '{' and the next '}', if not empty.
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else None


def slot_key(key: str, name: str) -> str:
    """The key ``name`` of the lock at ``key`` (its fence, a semaphore's queue, a mode's latest
    call), named so that Redis Cluster puts it in ``key``'s slot: every key one script touches
    must share a slot. The one rule every such key is named by.

    A key with a hash tag keeps it (``{t}:a:b`` -> ``{t}:a:b:latest``); one without is wrapped
    in one (``a:b`` -> ``{a:b}:latest``, the slot of ``a:b``). A key without a tag that has a
    ``}`` cannot be wrapped: it is suffixed only (one Redis is fine, a cluster is not; the task
    keys never are such, see :func:`untaggable`).
    """
    base = key if _hash_tag(key) is not None or "}" in key else "{" + key + "}"
    return f"{base}:{name}"


def slot_key_owner(slot_name: str) -> tuple[str, str] | None:
    """``(key, name)`` of a key made by :func:`slot_key`; None for any other key."""
    base, _, name = slot_name.rpartition(":")
    key = base[1:-1] if base.startswith("{") and base.endswith("}") else base
    return (key, name) if key and slot_key(key, name) == slot_name else None


def untaggable(key: str) -> bool:
    """Whether no other key can be named in ``key``'s cluster slot by :func:`slot_key`: a
    key without a hash tag that has a ``}`` (``a}b``, ``a{}b``)."""
    return _hash_tag(key) is None and "}" in key


def semaphore_keys(key: str) -> tuple[str, str, str]:
    """The waiters' queue, the waiters' liveness and the ticket counter of the semaphore whose
    holders live at ``key``, in ``key``'s cluster slot (:func:`slot_key`)."""
    return slot_key(key, "queue"), slot_key(key, "alive"), slot_key(key, "ticket")


def fence_key(key: str) -> str:
    """The fencing-token counter of the lock at ``key``, in ``key``'s slot (:func:`slot_key`)."""
    return slot_key(key, "fence")


def released_key(key: str) -> str:
    """The holders an operator released ``key`` from (a hash), kept until each one's renewal
    finds it, in ``key``'s slot (:func:`slot_key`): so the renewal does not take the lock back."""
    return slot_key(key, "released")


def record_key(prefix: str, task_id: str, beside: str | None = None) -> str:
    """The record of the decisions on the call ``task_id`` (``engine.decision_record``): one
    key per call, ``{prefix:task id}:explain`` (:func:`slot_key`'s form: outside the lock keys'
    ``prefix:*``); on a cluster (``beside``: a key of the deciding script) named in ``beside``'s
    slot, ``{beside}:explain:task id``, one key per slot the call's decisions touched, which
    :func:`record_glob` finds."""
    if beside is None:
        return slot_key(f"{prefix}:{task_id}", "explain")
    return slot_key(beside, f"explain:{task_id}")


def record_glob(task_id: str) -> str:
    """A SCAN glob matching every record of ``task_id`` on a cluster, of any prefix and slot."""
    return f"*:explain:{glob_escape(task_id)}"


def glob_escape(text: str) -> str:
    """``text`` as a SCAN glob matching only itself (``*``, ``?``, ``[``, ``]``, ``\\`` escaped)."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def rate_limiter_key(prefix: str, name: str) -> str:
    """The log of the ``RedisRateLimiter`` named ``name``: ``{prefix}:{name}`` (``name`` alone
    without a prefix). A task's partitions are named by ``slot_key`` beside their lock keys."""
    return f"{prefix}:{name}" if prefix else name


def rate_keys(log: str) -> tuple[str, str, str]:
    """The keys of the rate limiter whose log (every grant and reservation, scored by time) is
    ``log``: the log, its reservations only (scored alike, so a window's starts are two ZCOUNTs)
    and the hop tokens of the calls holding them, in ``log``'s cluster slot (:func:`slot_key`)."""
    return log, slot_key(log, "reserved"), slot_key(log, "hops")


def grant_member(caller: str, attempt: int = 0, pauses: int = 0) -> str:
    """The log's entry of a start granted to ``caller`` (a task id) at its ``attempt``-th try
    (``request.retries``) after ``pauses`` pauses re-queued it: one per attempt, so a second copy
    of one finds it. ``g:<id>:<retries>``, and ``g:<id>:<retries>.p<pauses>`` after a pause (a
    call re-queued by a pause starts anew, whatever its start before it)."""
    return f"g:{caller}:{attempt}" + (f".p{pauses}" if pauses else "")


def reservation_member(caller: str) -> str:
    """The log's entry of the slot reserved for ``caller``; the hop tokens' field is ``caller``."""
    return f"r:{caller}"


def limit_keys(log: str) -> tuple[str, str, str, str, str]:
    """Every key of the rate limit whose log is ``log``, in its cluster slot: :func:`rate_keys`,
    then the bucket rates' state (a hash) and the end of a pause (:func:`slot_key`)."""
    return (*rate_keys(log), slot_key(log, "burst"), slot_key(log, "pause"))


def rate_overrides_key(prefix: str, log: str) -> str:
    """The hash of the runtime rates (field: a limit's name) that governs the limit logged at
    ``log`` under ``prefix``: the prefix's own when the prefix has a hash tag (every limit of the
    prefix shares its slot and the hash), else the limit's own, in its log's slot."""
    return slot_key(prefix, "overrides") if _hash_tag(prefix) is not None else slot_key(log, "overrides")


def unit_member(member: str, unit: int) -> str:
    """The log's entry of unit ``unit`` of a call costing several (``member`` is unit 0, a
    :func:`grant_member` or :func:`reservation_member`): the unit's number after the kind's letter
    (``g:t:0`` -> ``g2:t:0``), so no task id can make two units' entries alike.
    ``lua/rate_common.lua``'s ``unit_member`` is this rule, for the units the script adds."""
    return member if unit == 0 else f"{member[0]}{unit}{member[1:]}"


def fair_keys(prefix: str, queue: str) -> tuple[str, str, str]:
    """The keys of fair share's lanes of ``queue``, in one cluster slot (:func:`slot_key`): each
    lane's backlog (a hash), each tenant's backlog by lane (a hash), and each queued call's
    tenant and lane (a hash, by task id). A prefix with a hash tag keeps it."""
    base = f"{prefix}:fair:{queue}"
    return slot_key(base, "load"), slot_key(base, "tenants"), slot_key(base, "calls")


def fair_load_glob(prefix: str) -> str:
    """The SCAN glob of every queue's lane backlogs (``fair_keys``' first key)."""
    return glob_escape(fair_keys(prefix, "\0")[0]).replace("\0", "*")


def fair_queue_of(prefix: str, key: str) -> str | None:
    """The queue whose lane backlogs ``key`` holds (``fair_keys``' first key), else None."""
    owner = slot_key_owner(key)
    head = f"{prefix}:fair:"
    if owner is None or owner[1] != "load" or not owner[0].startswith(head):
        return None
    return owner[0][len(head) :]


def copy_key(prefix: str, task_id: str) -> str:
    """The record of the copies of a put-off call ``task_id`` (``waits.copies``)."""
    return f"{prefix}:copy:{task_id}"


def holds_key(prefix: str) -> str:
    """The operator's holds of the app under ``prefix`` (a hash: ``engine.holds``)."""
    return f"{prefix}:holds"


def fair_expiry_key(prefix: str, queue: str) -> str:
    """The queued calls of ``queue`` sent with an expiry (a sorted set, by when it passes), in
    the slot of :func:`fair_keys`."""
    return slot_key(f"{prefix}:fair:{queue}", "expiry")


def fair_marks_key(prefix: str, queue: str) -> str:
    """Each lane's generation and last ticket assigned (a hash: the lanes' counts set right by
    what the broker holds, ``lua/fair_heal.lua``), in the slot of :func:`fair_keys`."""
    return slot_key(f"{prefix}:fair:{queue}", "marks")
