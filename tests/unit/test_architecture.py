"""The package's layout is its architecture: read from its source with ``ast``, never imported.

The layers, lowest first; an import may only point down, or sideways inside one folder::

    errors.py < engine/ < config/ < waits/ < integration/ < modes/, gates/ < ops/ < compat/, contrib/, signals.py, __init__.py

(``signals.py`` is a public path only: each signal is declared by what sends it, below.)

Every import is read: ``import x``, ``from x import y``, relative ones, those inside functions
(a lazy import is still an arrow), and ``importlib.import_module`` with a literal name. Imports
under ``if TYPE_CHECKING:`` are not runtime arrows, so they cannot close an import circle; they
are still arrows of the design, so they must not point up either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import celery_redislock

PACKAGE = "celery_redislock"
ROOT = Path(celery_redislock.__file__).resolve().parent

#: Each unit of the package and its rank; a unit is a top-level folder or module.
RANKS = {
    "errors": 0,
    "engine": 1,
    "config": 2,
    "waits": 3,
    "integration": 4,
    "modes": 5,
    "gates": 5,
    "ops": 6,
    "compat": 7,
    "contrib": 7,
    "signals": 7,
    "__init__": 7,
}

MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def unit(module: str) -> str:
    """The layer unit of a package module: ``engine`` for ``celery_redislock.engine.keys``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the package module it loads
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        where = f"{MODULES[self.source].relative_to(ROOT.parent)}:{self.line}"
        return f"{self.source} -> {self.target} ({where}{', TYPE_CHECKING' if self.type_only else ''})"


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _resolve(source: str, name: str | None, level: int) -> str:
    """The absolute name of ``name`` imported ``level`` dots up from module ``source``."""
    if level == 0:
        return name or ""
    base = source.split(".") if _is_package(source) else source.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _known(name: str) -> str | None:
    """The package module ``name`` loads: itself, or the nearest enclosing package module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) body."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    inside.update(id(n) for n in ast.walk(child))
    return inside


def _targets(source: str, node: ast.AST) -> Iterator[str]:
    """The absolute module names an import node (or an ``import_module`` call) loads."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(source, node.module, node.level)
        for alias in node.names:  # `from pkg import mod` loads the submodule pkg.mod
            sub = f"{base}.{alias.name}"
            yield sub if sub in MODULES else base
    elif isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            name = str(node.args[0].value)
            level = len(name) - len(name.lstrip("."))
            yield _resolve(source, name[level:] or None, level)


def read(source: str, text: str) -> set[Import]:
    """The imports of package modules in ``text``, the source of package module ``source``."""
    tree = ast.parse(text)
    type_only = _type_checking_nodes(tree)
    found = set()
    for node in ast.walk(tree):
        for name in _targets(source, node):
            target = _known(name) if name.split(".")[0] == PACKAGE else None
            if target is not None and target != source:
                found.add(Import(source, target, getattr(node, "lineno", 0), id(node) in type_only))
    return found


def imports() -> list[Import]:
    """Every import of a package module by a package module, sorted."""
    found = set()
    for source, path in MODULES.items():
        found |= read(source, path.read_text(encoding="utf-8"))
    return sorted(found, key=lambda i: (i.source, i.line, i.target))


IMPORTS = imports()


def circles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_reader_sees_every_kind_of_import() -> None:
    # The checks below are only as good as this reader.
    text = """
import typing
import celery_redislock.engine.keys
from ..errors import LockError
from . import holders, nothing_such
from .. import signals as _signals

if typing.TYPE_CHECKING:
    from ..integration.task import SingletonTask


def later():
    from celery_redislock.config import options
    return importlib.import_module("..ops.stats", __name__)
"""
    found = {
        (i.target.removeprefix(f"{PACKAGE}."), i.type_only) for i in read(f"{PACKAGE}.engine.leases", text)
    }
    assert found == {
        ("engine.keys", False),
        ("errors", False),
        ("engine.holders", False),
        ("engine", False),  # `from . import nothing_such`: a name of the package's __init__
        ("signals", False),
        ("integration.task", True),
        ("config.options", False),
        ("ops.stats", False),
    }
    # And on the package itself: its __init__'s lazy import_module and its TYPE_CHECKING import.
    assert {(i.target, i.type_only) for i in IMPORTS if i.source == PACKAGE} >= {
        (f"{PACKAGE}.integration.task", True),
        (f"{PACKAGE}.integration.task", False),
    }
    assert set(RANKS) == {unit(module) for module in MODULES}, "a new top-level unit needs a rank"


def test_circles_are_found() -> None:
    errors, signals, keys = f"{PACKAGE}.errors", f"{PACKAGE}.signals", f"{PACKAGE}.engine.keys"
    edges = [
        Import(errors, signals, 1, False),
        Import(signals, keys, 1, False),
        Import(keys, errors, 1, False),
    ]
    assert circles(edges) == [sorted([errors, signals, keys])]
    assert circles(edges[:2]) == []


def test_no_import_circle_between_modules_of_the_package() -> None:
    runtime = [edge for edge in IMPORTS if not edge.type_only]
    found = circles(runtime)
    described = []
    for members in found:
        ties = [str(edge) for edge in runtime if edge.source in members and edge.target in members]
        described.append(" <-> ".join(members) + ":\n    " + "\n    ".join(ties))
    assert not found, "import circles:\n  " + "\n  ".join(described)


def per_layer(failing: dict[str, str]) -> list[object]:
    """One case a layer; those in ``failing`` (layer: what remains) are strict xfails: once the
    layer is fixed its case fails (XPASS), and its entry is to be deleted."""
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=failing[name])] if name in failing else [],
        )
        for name in RANKS
    ]


#: The imports that still point up, by importing layer.
UP_TODAY: dict[str, str] = {}


@pytest.mark.parametrize("layer", per_layer(UP_TODAY))
def test_no_import_points_up_the_layers(layer: str) -> None:
    up = [
        str(edge)
        for edge in IMPORTS
        if unit(edge.source) == layer and RANKS[unit(edge.target)] > RANKS[layer]
    ]
    assert not up, f"imports of {layer} pointing up the layers:\n  " + "\n  ".join(up)


#: The modules still over the size, by layer.
SIZE_TODAY: dict[str, str] = {}


@pytest.mark.parametrize("layer", per_layer(SIZE_TODAY))
def test_every_module_is_at_most_400_lines(layer: str) -> None:
    sizes = {
        module: len(path.read_text(encoding="utf-8").splitlines())
        for module, path in MODULES.items()
        if unit(module) == layer
    }
    over = [f"{MODULES[m].relative_to(ROOT.parent)}: {n} lines" for m, n in sizes.items() if n > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines:\n  " + "\n  ".join(over)


def test_importing_the_engine_loads_no_celery() -> None:
    # A process of its own: this one has loaded Celery long ago.
    code = (
        "import sys, celery_redislock.engine\n"
        "print(' '.join(sorted(m for m in sys.modules if m == 'celery' or m.startswith('celery.'))))\n"
        f"print(' '.join(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    celery_modules, ours = done.stdout.splitlines()
    assert not celery_modules, (
        f"import {PACKAGE}.engine loaded Celery ({celery_modules}) with these package modules: {ours}"
    )


def calls_of(attribute: str) -> Iterator[tuple[str, ast.Call]]:
    """``(module, call)`` for every call of a function or method named ``attribute``."""
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name == attribute:
                    yield module, node


def test_every_logger_is_named_by_its_module() -> None:
    loggers = list(calls_of("getLogger"))
    assert loggers, "the reader found no logger"
    misnamed = [
        f"{MODULES[module].relative_to(ROOT.parent)}:{call.lineno}"
        for module, call in loggers
        if not (len(call.args) == 1 and isinstance(call.args[0], ast.Name) and call.args[0].id == "__name__")
    ]
    assert not misnamed, "loggers not named getLogger(__name__):\n  " + "\n  ".join(misnamed)


def _where(module: str, node: ast.AST) -> str:
    return f"{MODULES[module].relative_to(ROOT.parent)}:{getattr(node, 'lineno', 0)}"


def _scaled_by(node: ast.AST, factors: tuple[float, ...]) -> bool:
    """Whether ``node`` multiplies or divides by one of ``factors`` (``1000``, ``1e3``, ``1000.0``...)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div, ast.FloorDiv))):
        return False
    return any(
        isinstance(side, ast.Constant) and type(side.value) in (int, float) and side.value in factors
        for side in (node.left, node.right)
    )


def test_seconds_and_milliseconds_are_converted_in_one_place() -> None:
    # engine.timing: to_ms (one rounding rule and floor) and to_seconds / ttl_seconds (one rule
    # for PTTL's -1 and -2), where copies rounded, truncated or ceiled, and read -1 as 0 or none.
    found = [
        (module, _where(module, node))
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _scaled_by(node, (1000,))
    ]
    outside = [where for module, where in found if module != f"{PACKAGE}.engine.timing"]
    assert found and not outside, (
        "seconds and milliseconds converted outside engine.timing:\n  " + "\n  ".join(outside)
    )


def test_the_server_clock_is_read_in_one_place() -> None:
    # engine.timing.server_time asks TIME, time_of reads its reply (a script's included).
    timing = f"{PACKAGE}.engine.timing"
    asked = [
        _where(module, call)
        for module, call in calls_of("time")
        if module != timing
        and not (isinstance(call.func, ast.Attribute) and ast.unparse(call.func) == "time.time")
    ]
    named = [
        _where(module, node)
        for module, path in MODULES.items()
        if module != timing
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Constant) and node.value == "TIME") or _scaled_by(node, (1_000_000,))
    ]
    assert not asked + named, "the server's TIME asked or read outside engine.timing:\n  " + "\n  ".join(
        asked + named
    )


def test_importing_the_config_loads_no_celery() -> None:
    # config reads and validates; what knows Celery (a task's keywords, its attributes) is the
    # glue's. A process of its own, every config module imported.
    config = sorted(module for module in MODULES if unit(module) == "config")
    code = (
        "import importlib, sys\n"
        f"for name in {config!r}: importlib.import_module(name)\n"
        "print(' '.join(sorted(m for m in sys.modules if m == 'celery' or m.startswith('celery.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert not done.stdout.strip(), f"importing the config loaded Celery: {done.stdout.strip()}"


def test_every_option_is_declared_once_by_its_spec() -> None:
    # One declaration per option (config.schema): the lock's as LockOption attributes of
    # LockOptions, a mode's in its OptionSpec. No class body writes an option down again (the
    # task class's attributes, a second list of defaults): those read the schema. (What type
    # checkers see is under TYPE_CHECKING, checked against the specs below.)
    import celery_redislock.gates
    import celery_redislock.modes  # noqa: F401  (the modes register their options)
    from celery_redislock import SingletonTask
    from celery_redislock.config.schema import option_names

    names = option_names()
    again = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign):
                    targets, value = [statement.target], statement.value
                elif isinstance(statement, ast.Assign):
                    targets, value = statement.targets, statement.value
                else:
                    continue
                declared = isinstance(value, ast.Call) and getattr(value.func, "id", None) == "LockOption"
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names and not declared:
                        where = f"{MODULES[module].relative_to(ROOT.parent)}:{statement.lineno}"
                        again.append(f"{where} {node.name}.{target.id}")
    assert not again, "options declared outside their spec:\n  " + "\n  ".join(again)
    # The task class reads them: each option an attribute, None ("ask the configuration").
    missing = sorted(name for name in names if vars(SingletonTask).get(name, "missing") is not None)
    assert not missing, f"options that are not a None attribute of SingletonTask: {missing}"


def declared_type(kind: str) -> str:
    """The annotation ``SingletonTask`` gives type checkers for an option of ``kind`` (the type as
    users write it, from its spec): None means "ask the configuration"."""
    annotation = kind.replace("callable", "Callable[..., Any]")
    return f"ClassVar[{annotation if annotation.endswith('| None') else annotation + ' | None'}]"


def type_declarations(source: str, class_name: str) -> dict[str, str]:
    """``name: annotation`` of the ``if TYPE_CHECKING:`` block of class ``class_name``."""
    [cls] = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name == class_name
    ]
    return {
        ast.unparse(statement.target): ast.unparse(statement.annotation)
        for block in cls.body
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for statement in block.body
        if isinstance(statement, ast.AnnAssign)
    }


def test_the_task_class_declares_each_option_to_type_checkers_as_its_spec_says() -> None:
    # Set from the schema at runtime, the options are invisible to type checkers but for the
    # TYPE_CHECKING block of SingletonTask: a line per spec, typed by its kind, none more.
    import celery_redislock.gates
    import celery_redislock.modes  # noqa: F401  (the modes register their options)
    from celery_redislock.config.schema import option_specs

    task = MODULES[f"{PACKAGE}.integration.task"]
    declared = type_declarations(task.read_text(encoding="utf-8"), "SingletonTask")
    expected = {spec.name: declared_type(spec.kind) for spec in option_specs()}
    wrong = [
        f"        {name}: {annotation}"
        for name, annotation in expected.items()
        if declared.get(name) != annotation
    ]
    extra = sorted(set(declared) - set(expected))
    assert not wrong and not extra, (
        f"{task.relative_to(ROOT.parent)}: SingletonTask's TYPE_CHECKING block is not the options'"
        " specs; write these lines there:\n" + "\n".join(wrong) + f"\nand remove: {extra}"
    )


def test_the_type_declarations_are_read_as_written() -> None:
    # The reader above, on a class with a spec missing, one too many and one mistyped.
    source = """
class SingletonTask:
    if TYPE_CHECKING:
        lock_timeout: ClassVar[float | None]
        rate_cost: ClassVar[int | Callable[..., Any] | dict[str, int | Callable[..., Any]] | None]
        stale: ClassVar[int | None]
    other: int = 1
"""
    assert type_declarations(source, "SingletonTask") == {
        "lock_timeout": "ClassVar[float | None]",
        "rate_cost": "ClassVar[int | Callable[..., Any] | dict[str, int | Callable[..., Any]] | None]",
        "stale": "ClassVar[int | None]",
    }
    assert declared_type("float") == "ClassVar[float | None]"
    assert declared_type("int | callable | dict[str, int | callable] | None") == (
        "ClassVar[int | Callable[..., Any] | dict[str, int | Callable[..., Any]] | None]"
    )


def _counted(call: ast.Call) -> str | None:
    """The name a ``count(...)`` (or ``counting.count(...)``) call counts, if a literal."""
    first = call.args[0] if call.args else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def test_every_counted_name_is_registered_by_somebody() -> None:
    # engine.counting drops a count of a name no one registered (logged once): a typo would
    # count nothing. The core's counters are engine.counting's; a mode's or gate's, its own.
    from celery_redislock import SingletonTask
    from celery_redislock.engine.counting import counter_names

    assert SingletonTask  # loading it registers every mode and gate
    counted = [  # not itertools.count
        (f"{MODULES[module].relative_to(ROOT.parent)}:{call.lineno}", _counted(call))
        for module, call in calls_of("count")
        if isinstance(call.func, ast.Name) or ast.unparse(call.func) == "counting.count"
    ]
    assert counted, "the reader found no count"
    unnamed = [where for where, name in counted if name is None]
    assert not unnamed, "counts not of a literal name, which this test cannot check:\n  " + "\n  ".join(
        unnamed
    )
    unknown = [f"{where} {name!r}" for where, name in counted if name not in counter_names()]
    assert not unknown, "counted, registered by no one:\n  " + "\n  ".join(unknown)


def test_lua_is_read_and_registered_by_the_engine_alone() -> None:
    # One loader (engine.script_runner.package_script) and the engine's clients register
    # scripts; a mode hands its source to the engine's ScriptRunner.
    outside = [
        f"{MODULES[module].relative_to(ROOT.parent)}:{call.lineno} {name}"
        for name in ("register_script", "files", "eval", "evalsha", "script_load")
        for module, call in calls_of(name)
        if unit(module) != "engine"
    ]
    assert not outside, "Lua read or run outside the engine:\n  " + "\n  ".join(outside)
