"""Every test the documentation names (``tests/<path>.py::test_name``) exists: the guarantees
page cites one for each promise, and a renamed test must not leave the page citing nothing.
And the pages carry no development history (rounds, sessions, issue numbers)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")


def cited() -> set[tuple[str, str | None]]:
    found: set[tuple[str, str | None]] = set()
    for page in (ROOT / "docs").rglob("*.md"):
        found.update(REFERENCE.findall(page.read_text()))
    return {(path, name or None) for path, name in found}


def test_the_docs_cite_tests() -> None:
    assert len([name for _, name in cited() if name]) >= 40


def test_every_test_the_docs_cite_exists() -> None:
    missing = []
    for path, name in sorted(cited(), key=str):
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
            continue
        if name is None:
            continue
        tree = ast.parse(file.read_text())
        defined = {
            node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        if name not in defined:
            missing.append(f"{path}::{name}")
    assert not missing, f"the docs cite tests that do not exist: {missing}"


def test_the_docs_hold_no_development_history() -> None:
    history = re.compile(r"\bsession \d+|\bissue \d+|\bSPEC\.md\b|\b(?:this|previous|next) round\b", re.I)
    found = [
        f"{page.relative_to(ROOT)}: {match.group(0)}"
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for match in history.finditer(page.read_text())
    ]
    assert not found, f"development history belongs in commit messages and the changelog: {found}"
