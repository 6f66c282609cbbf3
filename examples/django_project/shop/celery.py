"""The Celery app, configured the Django way: every ``CELERY_*`` setting of settings.py,
celery_redislock's as ``CELERY_REDISLOCK_*``.

    celery -A shop worker --loglevel=INFO
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
# CELERY_BROKER_URL -> broker_url, CELERY_REDISLOCK_URL -> redislock_url, ...
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
