"""A Django project whose Celery tasks are locked by celery_redislock (see README.md here)."""

from __future__ import annotations

# Loaded with Django, so @shared_task binds to this app (Celery's Django layout).
from .celery import app as celery_app

__all__ = ["celery_app"]
