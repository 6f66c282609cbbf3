"""celery-singleton 0.3.1 with its public names rebound to ``celery_redislock.compat``: what
``.ci/peer-suites`` runs celery-singleton's own tests against. Put in place of the package's
``__init__`` by that script; the package's other modules are celery-singleton's own (from its
sdist), so that its tests' imports of them still resolve."""

from celery_redislock.compat import DuplicateTaskError, Singleton, clear_locks

from . import exceptions as _exceptions
from . import singleton as _singleton

# The names its tests (and users) import from celery_singleton.singleton and .exceptions, too.
_singleton.Singleton = Singleton  # type: ignore[misc]
_singleton.clear_locks = clear_locks  # type: ignore[assignment]
_singleton.DuplicateTaskError = DuplicateTaskError  # type: ignore[misc]
_exceptions.DuplicateTaskError = DuplicateTaskError  # type: ignore[misc]

__version__ = "0.3.1"
__all__ = ["DuplicateTaskError", "Singleton", "clear_locks"]
