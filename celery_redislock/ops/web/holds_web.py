"""The page's holds: a call held (task, key values, length) and a hold lifted, each a POST with
the page's CSRF token, allowed only with ``allow_holds`` (``--allow-holds``). Bad input is one
line on the page naming what is wrong (``ops.holds``' ``OptionError``), nothing changed."""

from __future__ import annotations

from celery import Celery
from flask import Flask, abort, flash, redirect, request, url_for
from werkzeug.wrappers import Response

from ...errors import OptionError
from ..holds import hold_calls, lift_calls

__all__ = ["PROBLEM", "add_hold_routes"]

#: The flash category of a refusal (shown as a problem, not a success).
PROBLEM = "problem"


def add_hold_routes(web: Flask, app: Celery, allow_holds: bool) -> None:
    """``POST /hold`` and ``POST /lift`` on ``web``, the page of ``app``."""

    def may_hold() -> None:
        if not allow_holds:
            abort(403, "holding calls is not allowed here (start the page with --allow-holds)")

    def back() -> Response:
        return redirect(url_for("index") + "#holds", 303)

    @web.post("/hold")
    def hold() -> Response:
        may_hold()
        task = request.form.get("task", "").strip()
        key = request.form.get("key", "").split()
        length = request.form.get("seconds", "").strip()
        try:
            seconds = float(length) if length else None
        except ValueError:
            flash(f"Not held: seconds must be a number, or empty for until lifted, got {length!r}", PROBLEM)
            return back()
        try:
            replaced = hold_calls(app, task, key, seconds)
        except OptionError as exc:
            flash(f"Not held: {exc}", PROBLEM)
            return back()
        what = " ".join([task, *key])
        how = "until lifted" if seconds is None else f"for {seconds:g}s"
        flash(f"Held {what} {how}" + (" (replacing the hold there)" if replaced else ""))
        return back()

    @web.post("/lift")
    def lift() -> Response:
        may_hold()
        task = request.form.get("task", "")
        key = request.form.getlist("key")
        try:
            lifted = lift_calls(app, task, key)
        except OptionError as exc:
            flash(f"Not lifted: {exc}", PROBLEM)
            return back()
        what = " ".join([task, *key])
        flash(f"Lifted the hold of {what}" if lifted else f"{what} was not held")
        return back()
