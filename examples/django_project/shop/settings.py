"""Settings of the example project. The databases, the broker and the lock Redis come from the
environment: ``DATABASE_URL`` (``sqlite:///path`` or ``postgresql://user@host:port/name``),
``CELERY_BROKER_URL`` and ``REDISLOCK_URL``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import django

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",
    "reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "shop.wsgi.application"


def database(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for ``url``: ``sqlite:///path`` or ``postgresql://...``."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # A worker and the web process write at once: wait for SQLite's lock, not fail at once.
        options: dict[str, Any] = {"timeout": 20}
        if django.VERSION >= (5, 1):
            # A transaction that reads first takes the write lock at its start: SQLite answers a
            # read lock's upgrade with "database is locked" at once, whatever the timeout.
            options["transaction_mode"] = "IMMEDIATE"
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path, "OPTIONS": options}
    if parts.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    raise ValueError(f"DATABASE_URL={url!r}: the scheme must be sqlite or postgresql")


DATABASES = {"default": database(os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"

# Celery, read by shop/celery.py under the CELERY namespace.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0")
CELERY_RESULT_BACKEND = "django-db"  # django-celery-results: results in the project's database
CELERY_RESULT_EXTENDED = True  # the task's name and arguments kept with its result (admin)
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# celery_redislock: its redislock_* settings, under the same namespace.
CELERY_REDISLOCK_URL = os.environ.get("REDISLOCK_URL", "redis://localhost:6379/2")
CELERY_REDISLOCK_KEY_PREFIX = "shop"
CELERY_REDISLOCK_OPTIONS = {"lock_timeout": 30}

# The function that renders a report's body (reports.tasks.render_report): a dotted path.
REPORTS_RENDERER = "reports.rendering.render_body"
