"""The versions the README's install section states are the ones pyproject.toml declares (and
noxfile.py tests): a floor raised in one place and not the other fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_states_the_declared_pythons_and_floors() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pythons = [
        m.group(1)
        for c in project["classifiers"]
        if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))
    ]
    floors = {
        m.group(1): m.group(2)
        for d in project["dependencies"]
        if (m := re.fullmatch(r"(celery|kombu|redis)(?:\[\w+\])?>=([0-9.]+)", d))
    }
    assert project["requires-python"] == f">={pythons[0]}"
    stated = (
        f"Python {pythons[0]} to {pythons[-1]}, Celery ≥ {floors['celery']}, kombu ≥ {floors['kombu']}, "
        f"redis-py ≥ {floors['redis'].removesuffix('.0')}."
    )
    tested = (
        f"Python {pythons[0]} with Celery {floors['celery']}, kombu {floors['kombu']} and redis-py "
        f"{floors['redis']}, and Python {pythons[-1]} with the newest"
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert stated in readme
    assert tested in readme
