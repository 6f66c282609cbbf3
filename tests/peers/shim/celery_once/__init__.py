"""celery-once 3.0.1 with its public names rebound to ``celery_redislock.compat``: what
``.ci/peer-suites`` runs celery-once's own tests against. Put in place of the package's
``__init__`` by that script; the package's other modules are celery-once's own (from its sdist),
so that its tests' imports of them still resolve."""

from celery_redislock.compat import AlreadyQueued, QueueOnce

from . import tasks as _tasks

# The names its tests (and users) import from celery_once.tasks, too.
_tasks.QueueOnce = QueueOnce  # type: ignore[misc]
_tasks.AlreadyQueued = AlreadyQueued  # type: ignore[misc]

__version__ = "3.0.1"
__all__ = ["AlreadyQueued", "QueueOnce"]
