"""The option schema: every task option the package knows, each one ``OptionSpec``. The lock's
own options are declared once, as ``LockOption`` attributes of ``options.LockOptions``; a mode
declares its options on itself and they join the schema when it registers (``add_options``), so
config imports no mode and a mode is one module. Whatever reads options reads the schema: the
validation, the task class's attributes (``watch_options``), the keyword check and the
generated options reference (``option_specs()``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

__all__ = [
    "LOCK",
    "LockOption",
    "OptionSpec",
    "add_options",
    "option_names",
    "option_specs",
    "spec_of",
    "watch_options",
]

#: The ``owner`` of the lock's own options (a mode's are owned by the mode's name).
LOCK = "lock"

T = TypeVar("T")


@dataclass(frozen=True)
class OptionSpec:
    """One task option: its name, its default, the check that normalises a value (raising
    ``engine.checks.BadValue`` naming what is wrong), a sentence or two for the reference, the
    type as users write it, who owns it (``LOCK`` or a mode's name), and whether it names the
    task's arguments as ``lock_key`` does (then checked against the body's signature at
    registration, as ``lock_key`` is)."""

    name: str
    default: Any
    check: Callable[[Any], Any]
    doc: str
    kind: str
    owner: str = LOCK
    names_arguments: bool = False


@dataclass(frozen=True)
class LockOption(OptionSpec, Generic[T]):
    """An option of the lock itself, declared as an attribute of the class that holds the
    resolved options: read on an instance, it is the option's value (typed ``T``, kept in the
    instance's ``__dict__``, which wins over this non-data descriptor: no cost on the hot path);
    read on the class, it is the spec."""

    default: T
    check: Callable[[Any], T]

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"option {self.name!r} is declared as {owner.__name__}.{name}")

    @overload
    def __get__(self, instance: None, owner: type) -> LockOption[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> LockOption[T] | T:
        if instance is None:
            return self
        raise AttributeError(f"{type(instance).__name__} has no value for option {self.name!r}")


_specs: dict[str, OptionSpec] = {}
_names: list[frozenset[str]] = [frozenset()]
_watchers: list[Callable[[OptionSpec], None]] = []


def add_options(specs: Iterable[OptionSpec]) -> None:
    """Add ``specs`` to the schema, and tell each watcher of the new ones. Adding one again is a
    no-op (a module imported twice); a name another owner has already is a ``ValueError``, as is
    a spec a watcher refuses (then it is not added)."""
    for spec in specs:
        known = _specs.get(spec.name)
        if known is not None and known.owner != spec.owner:
            raise ValueError(
                f"option {spec.name!r} of {spec.owner!r} is already an option of {known.owner!r}"
            )
        if known is None:
            for watcher in _watchers:
                watcher(spec)
        _specs[spec.name] = spec
    _names[0] = frozenset(_specs)


def watch_options(watcher: Callable[[OptionSpec], None]) -> None:
    """Call ``watcher`` with every option known now, then with each one added later (a mode
    registered after the watcher); it raises ``ValueError`` to refuse one."""
    _watchers.append(watcher)
    for spec in _specs.values():
        watcher(spec)


def option_specs() -> tuple[OptionSpec, ...]:
    """Every option known now: the lock's first, then each registered mode's, in order."""
    return tuple(_specs.values())


def option_names() -> frozenset[str]:
    """The names of ``option_specs()``."""
    return _names[0]


def spec_of(name: str) -> OptionSpec | None:
    """The option named ``name``, or None when none is known by it."""
    return _specs.get(name)
