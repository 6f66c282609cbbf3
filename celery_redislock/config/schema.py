"""The option schema: every task option the package knows, each one ``OptionSpec``. The lock's
own options are declared by ``options``; a mode declares its options on itself and they join
the schema when it registers (``add_options``), so config imports no mode and a mode is one
module. The generated options reference reads ``option_specs()``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOCK", "OptionSpec", "add_options", "option_names", "option_specs", "spec_of"]

#: The ``owner`` of the lock's own options (a mode's are owned by the mode's name).
LOCK = "lock"


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


_specs: dict[str, OptionSpec] = {}
_names: list[frozenset[str]] = [frozenset()]


def add_options(specs: Iterable[OptionSpec]) -> None:
    """Add ``specs`` to the schema. Adding one again is a no-op (a module imported twice); a
    name another owner has already is a ``ValueError``."""
    for spec in specs:
        known = _specs.get(spec.name)
        if known is not None and known.owner != spec.owner:
            raise ValueError(
                f"option {spec.name!r} of {spec.owner!r} is already an option of {known.owner!r}"
            )
        _specs[spec.name] = spec
    _names[0] = frozenset(_specs)


def option_specs() -> tuple[OptionSpec, ...]:
    """Every option known now: the lock's first, then each registered mode's, in order."""
    return tuple(_specs.values())


def option_names() -> frozenset[str]:
    """The names of ``option_specs()``."""
    return _names[0]


def spec_of(name: str) -> OptionSpec | None:
    """The option named ``name``, or None when none is known by it."""
    return _specs.get(name)
