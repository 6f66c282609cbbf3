"""Deprecated: the harnesses moved to ``celery_redislock.contrib.testing`` (no pytest import)
and the fixtures to ``celery_redislock.contrib.pytest`` (still loaded by pytest on its own)."""

from __future__ import annotations

import warnings
from typing import Any

from .contrib import testing as _testing

__all__ = list(_testing.__all__)


def __getattr__(name: str) -> Any:
    # Warn where an old import is used, not merely where this module is imported.
    if name not in __all__:  # __path__, __spec__... asked by the import system
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_testing, name)
    warnings.warn(
        f"celery_redislock.testing.{name} moved: import it from celery_redislock.contrib.testing",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
