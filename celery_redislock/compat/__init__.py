"""Drop-in task bases for celery-once and celery-singleton users, on this package's lock.

``from celery_once import QueueOnce, AlreadyQueued`` becomes
``from celery_redislock.compat import QueueOnce, AlreadyQueued``;
``from celery_singleton import Singleton, DuplicateTaskError, clear_locks`` becomes
``from celery_redislock.compat import Singleton, DuplicateTaskError, clear_locks``.
"""

from __future__ import annotations

from ._common import LEGACY_SETTING
from .once import AlreadyQueued, QueueOnce
from .singleton import DuplicateTaskError, Singleton, clear_locks

__all__ = ["LEGACY_SETTING", "AlreadyQueued", "DuplicateTaskError", "QueueOnce", "Singleton", "clear_locks"]
