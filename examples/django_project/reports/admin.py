from __future__ import annotations

from django.contrib import admin

from .models import Digest, Report


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = ("title", "rendered_at", "fence", "fence_key")
    readonly_fields = ("body", "rendered_by", "rendered_at", "fence", "fence_key")


@admin.register(Digest)
class DigestAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = ("day", "reports", "sent_at")
