"""The installed distribution's metadata: no pytest11 entry point (the fixtures are opt-in), the
one version, the licence. ``.ci/package-check`` asks the same of the built wheel."""

from __future__ import annotations

import importlib.metadata

import celery_redislock

DIST = importlib.metadata.distribution("celery-redislock")


def test_no_pytest_plugin_is_loaded_by_an_entry_point() -> None:
    groups = {entry.group for entry in DIST.entry_points}
    assert "pytest11" not in groups
    assert "celery.commands" in groups  # the reading works: the CLI's entry point is there


def test_one_version() -> None:
    assert DIST.version == celery_redislock.__version__


def test_the_licence_is_declared_and_shipped() -> None:
    assert DIST.metadata["License-Expression"] == "BSD-3-Clause"
    assert DIST.metadata.get_all("License-File") == ["LICENSE"]
