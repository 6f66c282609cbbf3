"""The page's explain view: search a task id, see what the package decided each time it saw
that call (``ops.explain``), newest first, escaped as every value of the page is."""

from __future__ import annotations

from celery import Celery
from flask import Flask, render_template, request

from ..explain import explain

__all__ = ["add_explain_view"]

#: The longest task id the search takes (Celery's are 36 characters): a longer one is refused.
MAX_TASK_ID = 200


def add_explain_view(web: Flask, app: Celery) -> None:
    """Serve ``GET /explain?id=TASK_ID`` on ``web``: the explanation of that call, or the search
    box alone without an id. Read-only; a Redis failure is the page's one-line answer."""

    @web.get("/explain")
    def explain_call() -> str:
        task_id = request.args.get("id", "").strip()
        problem = None
        if len(task_id) > MAX_TASK_ID:
            problem = f"a task id is at most {MAX_TASK_ID} characters; this one has {len(task_id)}"
        explanation = explain(app, task_id) if task_id and problem is None else None
        return render_template("explain.html", task_id=task_id, problem=problem, explanation=explanation)
