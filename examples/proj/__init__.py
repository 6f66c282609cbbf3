"""An example Celery project using celery_redislock: ``celery -A proj worker``."""

from .app import app

__all__ = ["app"]
