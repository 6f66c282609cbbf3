"""Keywords a task sets that are not options: Celery's own pass, a misspelt option is refused
at registration with the option meant, and so is another package's option (celery-once's,
celery-singleton's: ``compat.peer_keywords`` registers them) with what to write instead."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from celery import Task

from ..config.options import option_names, source_task, unknown_option
from ..errors import OptionError

__all__ = [
    "CELERY_NAMES",
    "CELERY_TASK_KEYWORDS",
    "CLOSE_TO_OPTION",
    "SHORTEST_GUESSED",
    "PeerOption",
    "add_peer_options",
    "check_keywords",
    "check_task_keywords",
    "user_keywords",
]

#: How close (difflib ratio) a task keyword must be to an option name to be taken for a misspelt
#: option: typos and plurals score above it (lock_timout 0.96, on_duplicates 0.96, concurrency
#: 0.85); Celery's own keywords (retry_backoff 0.57, routing_key 0.53) and names that merely
#: share a word (timeout 0.74, lock_name 0.75) below it.
CLOSE_TO_OPTION = 0.8
#: Options shorter than this are never guessed at: ordinary words sit within CLOSE_TO_OPTION of a
#: short name (``lock``: clock, block, locks, locked), and a user's own attribute must pass.
SHORTEST_GUESSED = 6


#: Another package's task option: ``(package, what to write instead, given the value)``.
PeerOption = tuple[str, Callable[[Any], str]]

_peers: dict[str, PeerOption] = {}


def add_peer_options(options: Mapping[str, PeerOption]) -> None:
    """Refuse these task keywords of another package, saying what to write instead."""
    _peers.update(options)


def check_task_keywords(keywords: Mapping[str, Any], source: str) -> None:
    """Refuse the keywords of a task (``@app.task(base=SingletonTask, ...)`` or class attributes)
    that look meant for this package but are not its options: another package's option
    (``add_peer_options``), or a name within ``CLOSE_TO_OPTION`` of an option's. Any other name is
    the user's own attribute and is left alone.

    ``keywords`` are the names the task set that Celery does not know (the glue filters out
    Celery's); options themselves are skipped here, ``validate`` checks their values.
    Raises ``OptionError`` naming ``source``, the keyword and what to write instead.
    """
    for name, value in keywords.items():
        if name in option_names():
            continue
        peer = _peers.get(name)
        if peer is not None:
            package, replacement = peer
            raise OptionError(
                name,
                source,
                f"is a {package} option, which SingletonTask ignores; write {replacement(value)}",
            )
        guessed = [option for option in option_names() if len(option) >= SHORTEST_GUESSED]
        if difflib.get_close_matches(name, guessed, n=1, cutoff=CLOSE_TO_OPTION):
            raise OptionError(name, source, unknown_option(name))


#: Keywords ``@app.task`` takes that are not attributes of ``celery.Task``: the autoretry ones
#: (celery/app/autoretry.py) and the deprecated routing attributes (Task.bind warns of them).
CELERY_TASK_KEYWORDS = frozenset(
    {
        "autoretry_for",
        "dont_autoretry_for",
        "retry_kwargs",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "queue",
        "exchange",
        "exchange_type",
        "routing_key",
        "delivery_mode",
        "store_eager_result",
    }
)

#: What Celery itself reads on a task: ``celery.Task``'s attributes and ``CELERY_TASK_KEYWORDS``.
# dir(), not hasattr(): Task.app is a class property that would bind celery.Task to an app.
CELERY_NAMES = frozenset(dir(Task)) | CELERY_TASK_KEYWORDS


def _is_code(value: Any) -> bool:
    """A method, property or nested class of a task subclass: its own code, not a setting."""
    return inspect.isroutine(value) or inspect.isdatadescriptor(value) or isinstance(value, type)


def user_keywords(task_class: type, base: type) -> dict[str, Any]:
    """The names a task set on itself that neither Celery nor this package define: the
    decorator's keywords (``_task_from_fun`` puts them in the class it makes, marked
    ``_decorated``) and the plain class attributes of the subclasses of ``base`` it derives from.

    Skipped: private names, ``celery.Task`` attributes and ``CELERY_TASK_KEYWORDS``, options,
    and in a hand-written subclass its methods, properties and nested classes. A decorator
    keyword is checked whatever its value: the user wrote it as a setting.
    """
    found: dict[str, Any] = {}
    for klass in task_class.__mro__:
        if klass is base or not issubclass(klass, base):
            continue  # base itself, its parents and mixins: not the task's own settings
        own = vars(klass)
        decorated = own.get("_decorated", False)
        # Options a subclass translates into native ones itself (the compat bases' peer options).
        consumed: frozenset[str] = getattr(task_class, "redislock_consumed_options", frozenset())
        for name, value in own.items():
            if name.startswith("_") or name in found or name in option_names() or name in consumed:
                continue
            if name in CELERY_NAMES:
                continue
            if not decorated and _is_code(value):
                continue
            found[name] = value
    return found


def check_keywords(task_class: type, base: type) -> None:
    """Refuse, naming the task, a keyword meant as an option that is not one (a typo, or another
    package's option); see ``check_task_keywords``."""
    name = getattr(task_class, "name", None) or task_class.__name__
    check_task_keywords(user_keywords(task_class, base), source_task(name))
