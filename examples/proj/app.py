"""The Celery app of the example project, configured from ``proj.celeryconfig``."""

from __future__ import annotations

from celery import Celery

app = Celery("proj", include=["proj.tasks"])
app.config_from_object("proj.celeryconfig")
