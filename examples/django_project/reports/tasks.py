"""The project's tasks: one locked where it runs and fenced, one locked at enqueue."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from celery_redislock import SingletonTask
from celery_redislock.contrib.fencing import StaleWriteError
from celery_redislock.contrib.fencing.django import fenced_update

from .models import Digest, Report

logger = logging.getLogger(__name__)


# Locked where it runs, on the report (two renders of one report never overlap), and fenced:
# a run that lost its lock (paused past lock_timeout) cannot write over the next run's body.
@shared_task(base=SingletonTask, bind=True, fencing=True, lock_key=["report_id"])
def render_report(self: Any, report_id: int) -> dict[str, Any]:
    report = Report.objects.get(pk=report_id)
    body = import_string(settings.REPORTS_RENDERER)(report, self)
    try:
        fenced_update(self, report, body=body, rendered_by=self.request.id, rendered_at=timezone.now())
    except StaleWriteError as refused:  # nothing written: a later run of this report wrote
        logger.warning("render of report %s not written: %s", report_id, refused)
        return {"report": report_id, "token": refused.token, "written": False}
    return {"report": report_id, "token": report.fence, "written": True}  # set by fenced_update


# Locked at enqueue: a second call for the same day while one is queued or running is not
# sent; delay() returns the queued call's AsyncResult.
@shared_task(base=SingletonTask, lock_on="enqueue")
def send_digest(day: str) -> int:
    count = Report.objects.count()
    Digest.objects.update_or_create(day=day, defaults={"reports": count})
    return int(count)
