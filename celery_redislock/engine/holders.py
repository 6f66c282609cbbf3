"""The holder-id grammar: every form is built, parsed and matched by these functions (Lua
matches them by the prefixes and suffixes these functions give).

- ``{task id}@{node}:{boot id}:{pid}:{n}``: an execution (a delivery of a message) holding its lock;
- ``{task id}@queued``: a lock taken by ``apply_async`` (``lock_on="enqueue"``);
- ``{task id}@handover``: a lock kept for the next run of a task id (a retry);
- ``{task id}@{tag}``: a mode's own form (``tagged_id``), named and documented by its mode;
- ``{uuid4 hex}@{host}:{pid}``: a ``RedisLock``/``RedisSemaphore`` acquisition.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import uuid

__all__ = [
    "BOOT_ID",
    "HANDOVER_SUFFIX",
    "QUEUED_SUFFIX",
    "any_delivery_prefix",
    "handover_id",
    "held_by_no_execution",
    "holder_id",
    "holder_prefix",
    "local_pid",
    "new_holder_id",
    "queued_id",
    "tagged_id",
    "task_id_of",
    "worker_of",
]


# Holder ids: every form is built and parsed here. The task id comes first so a parent process
# can free a dead child's lock by prefix; pid and a per-process sequence tell two deliveries of
# one message apart. A task id may contain "@" (the separator) or "%": both are escaped, so the
# first "@" of a holder id always ends its task id (node names contain "@" too: celery@host).
_sequence = itertools.count(1)

#: This worker's instance: drawn once per process tree when the package is imported (a prefork
#: worker's parent imports it before forking its children, which inherit it). It tells apart two
#: workers that share one node name (two containers started with ``-n worker@app``): a holder of
#: another instance names a pid in a PID namespace this one cannot see, so its liveness is never
#: judged from here.
BOOT_ID = secrets.token_hex(4)


def node_name(hostname: str | None) -> str:
    return hostname or socket.gethostname()


def _escaped(task_id: str) -> str:
    return task_id.replace("%", "%25").replace("@", "%40")


# What follows the task id in the holder ids this process draws, by node name: made once per
# process (a forked child starts afresh, with its own pid), not on every task.
_tails: dict[str | None, str] = {}
os.register_at_fork(after_in_child=_tails.clear)


def holder_id(task_id: str, hostname: str | None) -> str:
    tail = _tails.get(hostname)
    if tail is None:
        tail = _tails[hostname] = holder_prefix("", hostname, os.getpid())
    if "%" in task_id or "@" in task_id:  # never in Celery's own (uuid) task ids
        task_id = _escaped(task_id)
    return f"{task_id}{tail}{next(_sequence)}"


def holder_prefix(task_id: str, hostname: str | None, pid: int | None = None) -> str:
    """What every holder id of ``task_id`` taken by this worker instance (node ``hostname``,
    this BOOT_ID: the parent and all its children) starts with; given ``pid``, every one taken
    by that process of it."""
    prefix = f"{_escaped(task_id)}@{node_name(hostname)}:{BOOT_ID}:"
    return prefix if pid is None else f"{prefix}{pid}:"


def tagged_id(task_id: str, tag: str) -> str:
    """``{task id}@{tag}``: a holder id naming ``task_id`` and no execution (its run is over, or
    to come). ``tag`` says what it stands for; no execution's holder id ends that way."""
    return f"{_escaped(task_id)}@{tag}"


def local_pid(holder: str, task_id: str, hostname: str | None) -> int | None:
    """The pid of ``holder`` when it is a delivery of ``task_id`` taken by a process of this very
    worker instance (so the pid is one this process can look up); None for any other holder,
    including one of a worker with the same node name on another host."""
    prefix = holder_prefix(task_id, hostname)
    if not holder.startswith(prefix):
        return None
    pid = holder[len(prefix) :].split(":", 1)[0]
    return int(pid) if pid.isdigit() else None


#: Ends the holder id of a lock taken at enqueue: any execution of the task may take it over.
QUEUED_SUFFIX = "@queued"


def queued_id(task_id: str) -> str:
    """The value of a lock taken by ``apply_async`` (``lock_on="enqueue"``) for ``task_id``."""
    return f"{_escaped(task_id)}{QUEUED_SUFFIX}"


def task_id_of(holder: str) -> str:
    """The task id a holder id names (every holder id starts with it, escaped)."""
    return holder.split("@", 1)[0].replace("%40", "@").replace("%25", "%")


def any_delivery_prefix(task_id: str) -> str:
    """What the holder id of every delivery of ``task_id``, on any worker, starts with."""
    return f"{_escaped(task_id)}@"


#: Ends the holder id of a lock handed over to the next execution of a task id.
HANDOVER_SUFFIX = "@handover"


def handover_id(task_id: str) -> str:
    """The value a lock holds while handed over to the next execution of ``task_id``
    (a retry with ``release_on_retry=False``, or a task locked at enqueue)."""
    return f"{_escaped(task_id)}{HANDOVER_SUFFIX}"


def held_by_no_execution(holder: str) -> bool:
    """Whether ``holder`` is a lock no execution holds: taken at enqueue and not started yet,
    or handed over to a retry."""
    return holder.endswith((QUEUED_SUFFIX, HANDOVER_SUFFIX))


def new_holder_id() -> str:
    """A fresh holder id for a ``RedisLock`` or ``RedisSemaphore``: unique, and naming the host
    and process for whoever reads it."""
    return f"{uuid.uuid4().hex}@{socket.gethostname()}:{os.getpid()}"


def worker_of(holder: str) -> str:
    """Who a holder id says holds the lock, for a reader: ``node (pid N)`` for an execution or a
    ``RedisLock``/``RedisSemaphore`` acquisition; else what follows its task id (``queued``,
    ``handover``, a mode's tag)."""
    rest = holder.split("@", 1)[1] if "@" in holder else ""
    parts = rest.rsplit(":", 3)
    if len(parts) == 4 and parts[2].isdigit():  # node:boot id:pid:n (a node may contain "@")
        return f"{parts[0]} (pid {parts[2]})"
    if len(parts) == 2 and parts[1].isdigit():  # host:pid
        return f"{parts[0]} (pid {parts[1]})"
    return rest
