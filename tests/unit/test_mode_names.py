"""A new mode is one file: outside ``modes/`` and ``gates/`` no code names a registered mode or gate, one of
their options or one of their signals, as a string (the counters a mode registers are
``ops.stats``'s business; ``celery_redislock.signals`` re-exports the signals it did not
declare). Read from
the source with ``ast``: a string literal equal to such a name is a rule about that mode living
in the wrong place. Docstrings and comments may name them; they are never equal to a name."""

from __future__ import annotations

import ast
from pathlib import Path

import celery_redislock
import celery_redislock.gates
import celery_redislock.modes  # registers the modes and the gate
import celery_redislock.signals
from celery_redislock.integration.mode import registered, registered_gates, registered_signals

ROOT = Path(celery_redislock.__file__).resolve().parent

#: Where a mode's name may be written down: the modes and the gates themselves and the registry.
HOMES = ("modes/", "gates/", "integration/mode.py")

#: ``(file, name)`` pairs that stay, and why.
ALLOWED = {
    # The drop-ins translate a peer's keywords into this package's public options, as a user's
    # code would write them (celery-once's unlock_before_run is lock_until="started").
    ("compat/once.py", "lock_until"),
    # The public path of every signal lists the modes' in its __all__ (never declares them).
    *(("signals.py", name) for name in registered_signals()),
}


def mode_names() -> set[str]:
    """The registered modes' and gates' names, the options they own, the options selecting them
    and their signals (public names, and the names Celery knows them by)."""
    names: set[str] = {name for item in registered_signals().items() for name in (item[0], item[1].name)}
    for mode in registered():
        names |= {mode.name, *(spec.name for spec in mode.options)}
        if mode.option is not None:
            names.add(mode.option)
    for gate in registered_gates():
        names |= {gate.name, *(spec.name for spec in gate.options)}
    return names


def named_outside_modes(root: Path, names: set[str]) -> list[tuple[str, int, str]]:
    """``(file, line, name)`` of each string literal in the package at ``root`` equal to one of
    ``names``, outside the modes' homes."""
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where.startswith(HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append((where, node.lineno, node.value))
    return found


def test_the_names_are_those_the_modes_register() -> None:
    # Read from the registry, not listed here: a mode added later is checked without editing this.
    names = mode_names()
    assert {"throttle", "keep_latest", "debounce", "debounce_max", "until_started", "lock_until"} <= names
    assert {"rate_limit", "global_rate_limit", "rate_limit_key"} <= names
    assert {"task_rate_limited", "redislock.task_rate_paused"} <= names


def test_every_registered_signal_is_public_where_it_was() -> None:
    # A mode declares its signals; users import them from celery_redislock.signals.
    signals = registered_signals()
    assert signals, "no mode or gate registered a signal"
    hidden = [
        name
        for name, signal in signals.items()
        if getattr(celery_redislock.signals, name, None) is not signal
    ]
    assert not hidden, f"signals not re-exported by celery_redislock.signals: {hidden}"
    assert set(signals) <= set(celery_redislock.signals.__all__)


def test_no_mode_is_named_outside_modes_and_the_registry() -> None:
    found = named_outside_modes(ROOT, mode_names())
    stray = [f"{where}:{line} {name!r}" for where, line, name in found if (where, name) not in ALLOWED]
    assert not stray, "a mode named outside modes/ (give the rule to the mode):\n  " + "\n  ".join(stray)


def test_the_check_finds_a_mode_named_in_a_shared_layer(tmp_path: Path) -> None:
    # An exact string literal outside the homes is found; a docstring, a longer string and
    # the modes' own files are not.
    (tmp_path / "ops").mkdir()
    (tmp_path / "modes").mkdir()
    (tmp_path / "ops" / "stats.py").write_text(
        '"""Mentions throttle."""\nX = {"throttle": 1}\nY = "throttled"\n'
    )
    (tmp_path / "modes" / "throttle.py").write_text('NAME = "throttle"\n')
    # A mode's signal declared in the package's shared signals module (as it was).
    (tmp_path / "signals.py").write_text('task_rate_paused = Signal(name="redislock.task_rate_paused")\n')
    assert named_outside_modes(tmp_path, mode_names()) == [
        ("ops/stats.py", 2, "throttle"),
        ("signals.py", 1, "redislock.task_rate_paused"),
    ]
