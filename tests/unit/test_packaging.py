"""The installed distribution: no pytest11 entry point (the fixtures are opt-in), the one
version, the licence, and no test harness beyond what a user's own tests need.
``.ci/package-check`` runs these against the built wheel, installed in a clean venv."""

from __future__ import annotations

import importlib.metadata

import pytest

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


#: What the wheel ships in contrib: the fenced writes for the Django ORM and SQLAlchemy, and for
#: a user's own tests (docs/testing.md) a throwaway redis-server, the Sentinel set and cluster its
#: fixtures start, a worker subprocess, and the fixtures. The project's other harnesses
#: (RabbitMQ, PostgreSQL, a TLS certificate authority, round-trip counting, rate windows) are in
#: tests/harness, outside the package.
CONTRIB = [
    "celery_redislock/contrib/__init__.py",
    "celery_redislock/contrib/fencing/__init__.py",
    "celery_redislock/contrib/fencing/django.py",
    "celery_redislock/contrib/fencing/sqlalchemy.py",
    "celery_redislock/contrib/pytest.py",
    "celery_redislock/contrib/testing/__init__.py",
    "celery_redislock/contrib/testing/servers.py",
    "celery_redislock/contrib/testing/topologies.py",
    "celery_redislock/contrib/testing/workers.py",
]


def test_the_wheel_ships_no_test_harness() -> None:
    files = [str(path) for path in DIST.files or ()]
    if "celery_redislock/__init__.py" not in files:
        pytest.skip("an editable install lists no modules: .ci/package-check runs this on the built wheel")
    assert (
        sorted(f for f in files if f.startswith("celery_redislock/contrib/") and f.endswith(".py")) == CONTRIB
    )
    assert [f for f in files if f.split("/")[0] in ("tests", "benchmarks", "examples", "docs")] == []
