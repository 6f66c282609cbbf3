"""Views that queue tasks in ``transaction.on_commit``: a call is sent only once the rows it
reads are committed, and never for a transaction rolled back."""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_POST

from .models import Report
from .tasks import render_report, send_digest


@require_POST  # type: ignore[untyped-decorator]
def edit_report(request: HttpRequest, pk: int) -> JsonResponse:
    with transaction.atomic():
        report = get_object_or_404(Report.objects.select_for_update(), pk=pk)
        report.title = request.POST.get("title", report.title)
        report.save(update_fields=["title"])
        transaction.on_commit(partial(render_report.delay, report.pk))
    return JsonResponse({"report": report.pk, "queued": True}, status=202)


@require_POST  # type: ignore[untyped-decorator]
def request_digest(request: HttpRequest) -> JsonResponse:
    sent: list[str] = []

    def send() -> None:  # locked at enqueue: the queued call's id when one is queued
        sent.append(send_digest.delay(request.POST["day"]).id)

    transaction.on_commit(send)
    return JsonResponse({"task_id": sent[0] if sent else None}, status=202)
