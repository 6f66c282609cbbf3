"""The default renderer of a report's body (settings.REPORTS_RENDERER names the one used)."""

from __future__ import annotations

from typing import Any


def render_body(report: Any, task: Any) -> str:
    return f"<h1>{report.title}</h1>"
