"""The project's URLs: the admin, the reports' edit view, and the lock page for staff."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path
from reports import views

from .lock_page import lock_page

urlpatterns = [
    path("reports/<int:pk>/edit/", views.edit_report, name="edit-report"),
    path("reports/digest/", views.request_digest, name="request-digest"),
    # celery_redislock's lock page (its Flask app), mounted here for staff users only.
    re_path(r"^ops/locks/(?P<path>.*)$", lock_page, name="lock-page"),
    path("admin/", admin.site.urls),
]
