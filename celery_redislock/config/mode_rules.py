"""Which modes (docs/user-guide/modes.md) cannot go with which options: each mode registers
its rule here (``add_rule``), ``options._clash`` asks them in turn (``mode_clash``) and raises
the OptionError naming both options. Config imports no mode: the rules come to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Clash", "Rule", "add_rule", "mode_clash"]

#: ``(option, problem, other option)``: ``option`` cannot go with ``other option``.
Clash = tuple[str, str, str]


class Rule(Protocol):
    """A mode's rule: ``options`` (one layer, or the layers ``merged``) against the options its
    mode cannot go with; ``limit`` is their ``max_concurrency`` (1 when unset)."""

    def __call__(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None: ...


_rules: list[Rule] = []


def add_rule(rule: Rule) -> None:
    """Ask ``rule`` too, after the rules added before it (the first clash found is raised)."""
    if rule not in _rules:
        _rules.append(rule)


def mode_clash(options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
    """The first clash a registered mode's rule finds in ``options``, else None."""
    for rule in _rules:
        clash = rule(options, limit, merged=merged)
        if clash is not None:
            return clash
    return None
