"""celery_redislock's lock page (a Flask WSGI app, ``celery_redislock.ops.web``) mounted in the
Django site at /ops/locks/, for staff users only: Django's login and staff check in front, the
page's own views and templates behind, on the project's Celery app."""

from __future__ import annotations

import io
from functools import lru_cache
from http.cookies import SimpleCookie
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from celery_redislock.ops.web import create_app

from .celery import app as celery_app


@lru_cache(maxsize=1)
def page() -> Any:
    # Read-only: releasing a lock stays with `celery -A shop redislock release` (an operator).
    return create_app(celery_app, allow_release=False, poll_interval=5.0)


# The page keeps its own CSRF token for its forms (a signed cookie of its own, SameSite=Strict).
@csrf_exempt  # type: ignore[untyped-decorator]
@staff_member_required  # type: ignore[untyped-decorator]
def lock_page(request: HttpRequest, path: str = "") -> HttpResponse:
    """Hand the request to the page's WSGI app under this mount point; its answer, as Django's."""
    environ = dict(request.META)
    environ["SCRIPT_NAME"] = request.path[: len(request.path) - len(path)].rstrip("/")
    environ["PATH_INFO"] = "/" + path
    body = request.body
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.update(status=status, headers=headers)
        return lambda data: None

    chunks = page()(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    response = HttpResponse(content, status=int(started["status"].split()[0]))
    for name, value in started["headers"]:
        if name.lower() == "set-cookie":
            response.cookies.load(SimpleCookie(value))
        elif name.lower() != "content-length":
            response[name] = value
    return response
