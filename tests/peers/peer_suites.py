"""Run one peer's own test suite against the compat bases (called by ``.ci/peer-suites``): every
test of it but those ``excluded.txt`` lists, and one closing line with the counts.

    python tests/peers/peer_suites.py PEER SUITE_DIR SITE_DIR [pytest args...]

SUITE_DIR holds the peer's ``tests/`` (copied from ``suites/PEER``); SITE_DIR the peer's package
from its sdist with the shim's ``__init__`` in place. Exit status: pytest's, or 1 when a test of
the suite was neither run nor excluded.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent


def excluded(peer: str) -> dict[str, str]:
    """``excluded.txt``'s entries for ``peer``: test file or node id to reason."""
    entries = {}
    for line in (HERE / "excluded.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            owner, target, reason = (part.strip() for part in line.split("|", 2))
            if owner == peer:
                entries[target] = reason
    return entries


def node_ids(suite: Path) -> list[str]:
    """Every test of the suite, by node id, read from its source (some of its modules do not
    import on today's Celery, so pytest's collection cannot count them)."""
    ids = []
    for path in sorted(suite.glob("tests/**/test_*.py")):
        name = path.relative_to(suite).as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                ids.append(f"{name}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids.extend(
                    f"{name}::{node.name}::{item.name}"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test")
                )
    return ids


def is_excluded(node: str, targets: dict[str, str]) -> bool:
    return any(node == t or node.startswith(f"{t}::") for t in targets)


def main(peer: str, suite: Path, site: Path, extra: list[str]) -> int:
    targets = excluded(peer)
    ids = node_ids(suite)
    unknown = [t for t in targets if not any(n == t or n.startswith(f"{t}::") for n in ids)]
    if unknown:
        print(f"{peer}: excluded.txt names tests the suite does not have: {unknown}")
        return 1
    skipped = [n for n in ids if is_excluded(n, targets)]
    report = suite / "junit.xml"
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q"]
    args += [f"--rootdir={suite}", f"--junitxml={report}", *extra]
    for target in targets:
        args.append(f"--deselect={target}" if "::" in target else f"--ignore={target}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(suite), str(site)])}
    status = subprocess.call([*args, "tests"], cwd=suite, env=env)
    cases = ET.parse(report).getroot().iter("testcase")
    outcome = {"passed": 0, "failed": 0, "skipped": 0}
    for case in cases:
        kinds = {child.tag for child in case}
        key = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        outcome[key] += 1
    ran = sum(outcome.values())
    print(
        f"{peer}: {outcome['passed']} passed, {outcome['failed']} failed, {outcome['skipped']} skipped, "
        f"{len(skipped)} excluded, of {len(ids)} tests"
    )
    if ran + len(skipped) != len(ids):
        print(f"{peer}: {len(ids) - len(skipped)} tests should have run, {ran} did")
        return status or 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve(), sys.argv[4:]))
