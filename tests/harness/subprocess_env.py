"""The environment of a test's ``celery -A module`` subprocess: the test's module directory first,
then the checkout under test, so the subprocess imports this copy of the package and not one
installed (editable) from another checkout."""

from __future__ import annotations

import os
from pathlib import Path

import celery_redislock

__all__ = ["module_env"]

#: The root of the checkout whose package the tests import.
PACKAGE_ROOT = Path(celery_redislock.__file__).resolve().parent.parent


def module_env(directory: Path | str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with PYTHONPATH naming ``directory``, then the package's root."""
    base = dict(os.environ if environ is None else environ)
    return {**base, "PYTHONPATH": os.pathsep.join([str(directory), str(PACKAGE_ROOT)])}
