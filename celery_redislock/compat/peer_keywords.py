"""celery-once's and celery-singleton's task keywords, which ``SingletonTask`` does not read, and
what to write instead: registered with the task's keyword check (``integration.keywords``) on
import, so a task given one is refused at registration with the native options it means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import short_repr
from ..integration.keywords import PeerOption, add_peer_options

__all__ = ["PEER_OPTIONS"]


def _arg(value: Any) -> str:
    """A value as the keyword argument a user would write: lists as lists."""
    return short_repr(list(value) if isinstance(value, tuple) else value)


def _from_once(once: Any) -> str:
    """celery-once's ``once={'keys': [...], 'timeout': N, 'graceful': bool, ...}``: it locks at
    send and, unless graceful, raises AlreadyQueued there."""
    if not isinstance(once, Mapping):
        return 'lock_key=[<argument names>], lock_on="enqueue", on_duplicate="raise"'
    words = []
    keys = once.get("keys")
    if keys is not None:  # celery-once locks on every argument without 'keys'
        words.append(f"lock_key={_arg(keys)}")
    words.append('lock_on="enqueue"')
    words.append('on_duplicate="skip"' if once.get("graceful") else 'on_duplicate="raise"')
    if once.get("timeout") is not None:
        words.append(f"queued_timeout={_arg(once['timeout'])}")
    text = ", ".join(words)
    if once.get("unlock_before_run"):
        text += " (unlock_before_run has no equivalent: the lock is held until the run ends)"
    elif once.get("timeout") is not None:
        text += " (queued_timeout bounds the wait in the queue; the lock of a running task is renewed)"
    return text


def _from_unique_on(unique_on: Any) -> str:
    """celery-singleton's ``unique_on``: a list (or one name) of arguments; empty or None is
    every argument there. celery-singleton locks at send."""
    names = [unique_on] if isinstance(unique_on, str) else unique_on
    if not names:
        return 'lock_on="enqueue" and leave lock_key unset (an empty unique_on locks on every argument)'
    return f'lock_key={_arg(names)}, lock_on="enqueue"'


def _from_lock_expiry(expiry: Any) -> str:
    return (
        f"lock_timeout={_arg(expiry)} (renewed while the task runs, so it only bounds how long a "
        'crashed worker\'s lock outlives it; with lock_on="enqueue", queued_timeout bounds the wait '
        "in the queue)"
    )


def _from_raise_on_duplicate(raise_on_duplicate: Any) -> str:
    if raise_on_duplicate:
        return 'on_duplicate="raise", lock_on="enqueue" (DuplicateTaskError raised at send)'
    return (
        'lock_on="enqueue" and leave on_duplicate unset '
        "(a duplicate send then returns the holder's AsyncResult)"
    )


#: Task options of celery-once and celery-singleton, which SingletonTask does not read, and what
#: to write instead (given the value the task gave).
PEER_OPTIONS: dict[str, PeerOption] = {
    "once": ("celery-once", _from_once),
    "unique_on": ("celery-singleton", _from_unique_on),
    "lock_expiry": ("celery-singleton", _from_lock_expiry),
    "raise_on_duplicate": ("celery-singleton", _from_raise_on_duplicate),
}

add_peer_options(PEER_OPTIONS)
