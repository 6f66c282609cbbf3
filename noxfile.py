"""The supported versions, tested at both ends: the oldest Python with the oldest Celery, kombu and
redis-py that pyproject.toml allows, and the newest Python with the newest of each.

    nox                # both sessions, one after the other
    nox -s oldest      # one of them; arguments after -- go to pytest

The Pythons are the first and the last of pyproject's ``Programming Language :: Python :: 3.x``
classifiers; the oldest releases are the ``>=`` floors of its dependencies. Each session runs the
unit and integration tests and the worker tests of the lock's core promises.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import nox

try:
    import tomllib
except ImportError:  # Python < 3.11: nox depends on tomli there
    import tomli as tomllib

PROJECT = tomllib.loads(Path(__file__).with_name("pyproject.toml").read_text())["project"]
#: The dependencies whose oldest and newest releases are tested: the package calls each one.
PINNED = ("celery", "kombu", "redis")
TESTS = (
    "tests/unit",
    "tests/integration",
    "tests/worker/test_singleton.py",
    "tests/worker/test_faults.py",
    "tests/worker/test_failure_semantics.py",
)

nox.options.sessions = ["oldest", "newest"]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _pythons() -> list[str]:
    """The Python versions the classifiers declare, oldest first."""
    found = (re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c) for c in PROJECT["classifiers"])
    return sorted((m.group(1) for m in found if m), key=_version)


def _floors() -> list[str]:
    """``name==floor`` for each of PINNED, from its ``name>=floor`` (extras and markers aside)."""
    floors = {}
    for requirement in PROJECT["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*>=\s*([0-9.]+)", requirement.strip())
        if match and match.group(1).lower() in PINNED:
            floors[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    missing = set(PINNED) - set(floors)
    if missing:
        raise ValueError(f"pyproject.toml: no '>=' floor for {sorted(missing)}")
    return [floors[name] for name in PINNED]


def _interpreter(version: str) -> str:
    """pyenv's newest patch release of ``version`` if pyenv has one (its shims run only the
    versions selected with ``pyenv global``), else ``version`` for nox to find on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    releases = (
        p for p in root.glob(f"{version}.*/bin/python{version}") if re.fullmatch(r"[0-9.]+", p.parts[-3])
    )
    found = sorted(releases, key=lambda p: _version(p.parts[-3]))
    return str(found[-1]) if found else version


def _test(session: nox.Session, *requirements: str) -> None:
    session.install("-e", ".[test]", *requirements)
    session.run(
        "python",
        "-c",
        "import sys, celery, kombu, redis; print('Python', sys.version.split()[0], "
        "'celery', celery.__version__, 'kombu', kombu.__version__, 'redis', redis.__version__)",
    )
    # Outside the checkout and per run: concurrent pytest runs otherwise delete each other's.
    basetemp = tempfile.mkdtemp(prefix=f"nox-{session.name}-")
    args = session.posargs or TESTS
    # One test process, as CI's other passes: it runs beside them, and the machine has two cores.
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", f"--basetemp={basetemp}", *args
    )


@nox.session(python=_interpreter(_pythons()[0]), venv_backend="venv")
def oldest(session: nox.Session) -> None:
    """The oldest Python with the oldest Celery, kombu and redis-py declared."""
    _test(session, *_floors())


@nox.session(python=_interpreter(_pythons()[-1]), venv_backend="venv")
def newest(session: nox.Session) -> None:
    """The newest Python with the newest Celery, kombu and redis-py."""
    _test(session, "--upgrade", *PINNED)
