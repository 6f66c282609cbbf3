from __future__ import annotations

from django.apps import AppConfig


class ReportsConfig(AppConfig):  # type: ignore[misc]
    name = "reports"
    default_auto_field = "django.db.models.BigAutoField"
