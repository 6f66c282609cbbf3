"""A report rendered by a task; its ``fence`` and ``fence_key`` refuse a stale run's write."""

from __future__ import annotations

from django.db import models

from celery_redislock.contrib.fencing.django import FenceField, FenceKeyField


class Report(models.Model):  # type: ignore[misc]
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    rendered_by = models.CharField(max_length=100, blank=True, default="")
    rendered_at = models.DateTimeField(null=True, blank=True)
    fence = FenceField()  # the token of the last render written
    fence_key = FenceKeyField()  # the lock key it came from

    def __str__(self) -> str:
        return str(self.title)


class Digest(models.Model):  # type: ignore[misc]
    """One digest of the reports a day, sent by a task locked at enqueue."""

    day = models.DateField(unique=True)
    reports = models.IntegerField()
    sent_at = models.DateTimeField(auto_now=True)
