"""Deprecated: the worker lifecycle handlers live in ``celery_redislock.signals``, the queue a
message was consumed from in ``celery_redislock.queues``."""

from __future__ import annotations

import warnings

from .queues import QUEUE_FIELD, consumed_queue

__all__ = ["QUEUE_FIELD", "consumed_queue"]

warnings.warn(
    "celery_redislock.worker is deprecated: use celery_redislock.signals and celery_redislock.queues",
    DeprecationWarning,
    stacklevel=2,
)
