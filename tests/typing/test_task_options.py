"""``SingletonTask``'s options type-check: ``task_options.py`` passes ``mypy --strict`` with the
project's configuration, and a subclass giving an option a value of the wrong type fails it,
naming the option. Skipped where mypy is not installed (the ``dev`` extra has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parent.parent / "pyproject.toml"

BAD = """
from celery_redislock import SingletonTask


class Bad(SingletonTask):
    lock_timeout = "sixty"
    max_concurrency = 2.5
    throttle = [1]
"""


def mypy(*paths: Path, cache: Path) -> tuple[str, int]:
    api = pytest.importorskip("mypy.api")
    options = ["--config-file", str(PYPROJECT), "--cache-dir", str(cache), "--no-error-summary"]
    out, err, status = api.run([*options, *map(str, paths)])
    return out + err, status


def test_the_options_type_check(tmp_path: Path) -> None:
    bad = tmp_path / "bad_options.py"
    bad.write_text(BAD)
    report, status = mypy(HERE / "task_options.py", bad, cache=tmp_path / "cache")
    lines = report.splitlines()
    assert status == 1, report
    # The good file is clean; each wrong value is an error naming its option.
    assert not [line for line in lines if "task_options.py" in line], report
    errors = [line for line in lines if "bad_options.py" in line and ": error:" in line]
    assert len(errors) == 3, report
    source = BAD.splitlines()
    for line, option in zip(errors, ("lock_timeout", "max_concurrency", "throttle")):
        where = next(n for n, text in enumerate(source, 1) if text.strip().startswith(f"{option} ="))
        assert line.split(":")[1] == str(where), line
        assert "Incompatible types in assignment" in line and 'base class "SingletonTask"' in line, line
