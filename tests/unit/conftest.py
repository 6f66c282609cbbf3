"""The unit tests' Celery app: an in-memory broker and a lock Redis URL that is never connected
(options and plans need no server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("unit", broker="memory://", set_as_current=False)
    app.conf.redislock_url = "redis://127.0.0.1:1/0"  # never connected: plans need no Redis
    yield app
    app.close()
