"""The Django side of tests/examples/test_django_project.py, run in a process of its own with the
test's settings (``python django_driver.py STEP [ARG...]``): a web process's requests through
Django's test client, results read through django-celery-results. Prints one JSON value."""

from __future__ import annotations

import json
import sys
from typing import Any

import django

django.setup()

from celery.result import AsyncResult  # noqa: E402
from celery.signals import before_task_publish  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django_celery_results.models import TaskResult  # noqa: E402
from reports.models import Digest, Report  # noqa: E402

PUBLISHED: list[str] = []


@before_task_publish.connect
def _published(sender: str | None = None, **_: Any) -> None:
    PUBLISHED.append(str(sender))


def create(*titles: str) -> list[int]:
    """Reports with these titles (and a staff user): their ids."""
    if not User.objects.filter(username="staff").exists():
        User.objects.create_user("staff", password="pw", is_staff=True)
        User.objects.create_user("visitor", password="pw")
    return [Report.objects.create(title=title).pk for title in titles]


def enqueue(report_id: str, day: str) -> dict[str, Any]:
    """Edits through the views, in transactions: what was published when."""
    client = Client()
    seen: dict[str, Any] = {}
    with transaction.atomic():  # the view's own atomic block is nested in this one
        client.post(f"/reports/{report_id}/edit/", {"title": "rolled back"})
        seen["inside_rolled_back"] = list(PUBLISHED)
        transaction.set_rollback(True)
    seen["after_rollback"] = list(PUBLISHED)
    with transaction.atomic():
        client.post(f"/reports/{report_id}/edit/", {"title": "edited"})
        seen["inside_committed"] = list(PUBLISHED)
    seen["after_commit"] = list(PUBLISHED)
    # Locked at enqueue: the second call is not sent while the first is queued.
    seen["digests"] = [client.post("/reports/digest/", {"day": day}).json()["task_id"] for _ in range(2)]
    seen["published"] = list(PUBLISHED)
    return seen


def wait(*task_ids: str) -> list[Any]:
    """The results of these calls, read from the database (django-celery-results)."""
    return [AsyncResult(task_id).get(timeout=60) for task_id in task_ids]


def results(*task_ids: str) -> list[list[str]]:
    return [
        list(TaskResult.objects.filter(task_id=t).values_list("status", "task_name")[0]) for t in task_ids
    ]


def report(report_id: str) -> dict[str, Any]:
    row = Report.objects.get(pk=report_id)
    return {"title": row.title, "body": row.body, "rendered_by": row.rendered_by, "fence": row.fence,
            "fence_key": row.fence_key}  # fmt: skip


def digest(day: str) -> int:
    return int(Digest.objects.get(day=day).reports)


def page() -> dict[str, Any]:
    """The lock page, as a visitor, a user who is not staff and a staff user see it."""
    anonymous = Client().get("/ops/locks/")
    visitor = Client()
    visitor.login(username="visitor", password="pw")
    staff = Client()
    staff.login(username="staff", password="pw")
    shown = staff.get("/ops/locks/")
    return {
        "anonymous": [anonymous.status_code, anonymous.get("Location", "")],
        "visitor": visitor.get("/ops/locks/").status_code,
        "staff": [shown.status_code, shown.content.decode()],
    }


def direct(report_id: str) -> str:
    """The fenced task called directly (no worker, so no lock): the error it raises."""
    from reports.tasks import render_report

    try:
        render_report(int(report_id))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def bad_input(report_id: str) -> list[str]:
    """What a fenced write says to a model without a FenceField and to a token of another key."""
    from celery_redislock.contrib.fencing import Fence
    from celery_redislock.contrib.fencing.django import fenced_update

    said = []
    digest = Digest.objects.create(day="2025-02-01", reports=0)
    row = Report.objects.get(pk=report_id)
    fenced_update(Fence("shop:one", 10), row, body="by one")
    for fence, instance in [(Fence("shop:one", 11), digest), (Fence("shop:two", 20), row)]:
        try:
            fenced_update(fence, instance, body="refused")
        except Exception as exc:
            said.append(f"{type(exc).__name__}: {exc}")
    said.append(Report.objects.get(pk=report_id).body)
    return said


if __name__ == "__main__":
    step, *args = sys.argv[1:]
    print(json.dumps(globals()[step](*args)))
