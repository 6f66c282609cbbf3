"""A project's conftest.py: the package's pytest fixtures (opt-in), and an app on their Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

# The fixtures redislock_server, redislock_url, redislock_redis, ... (nothing starts until a
# test asks for one).
pytest_plugins = ["celery_redislock.contrib.pytest"]


@pytest.fixture
def app(redislock_url: str) -> Iterator[Celery]:
    """An app whose broker, results and locks are on the session's throwaway redis-server
    (flushed after each test)."""
    app = Celery("example", broker=redislock_url, backend=redislock_url, set_as_current=False)
    app.conf.broker_connection_retry_on_startup = False
    yield app
    app.close()
