"""The web page as a Flask (WSGI) app: the held locks, the modes' keys and the rate limits, the
operator's holds, the workers' counters over time, and, when allowed, a lock's release through a
confirmed POST, and holds set and lifted by a POST (``holds_web``)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from celery import Celery
from flask import Flask, Response, abort, flash, redirect, render_template, request, url_for

from ...engine.leases import REDIS_ERRORS
from ...integration.runtime import runtime_for
from ..cli_common import redis_failure_text
from ..listing import release_held, task_of
from .display import breakable
from .explain_view import add_explain_view
from .guard import CSRF_FIELD, Auth, csrf_token, harden, valid_csrf
from .history import CounterHistory, StatsPoller
from .holds_web import add_hold_routes
from .views import TENANT_SORTS, SeenSince, check_task_filter, lock_table, overview, page_problem

__all__ = ["WebState", "create_app"]

#: Lock rows a page shows at most; more are named, to be narrowed by task or key.
MAX_ROWS = 500
#: Tenants, and partitions of each named limit, on one page; the others on the next pages.
PAGE_ROWS = 100


class WebState:
    """What one page app keeps: its Celery app, permissions, and the counters' history."""

    def __init__(
        self,
        app: Celery,
        allow_release: bool,
        auth: Auth | None,
        poller: StatsPoller,
        allow_holds: bool = False,
    ) -> None:
        self.app = app
        self.allow_release = allow_release
        self.allow_holds = allow_holds
        self.auth = auth
        self.poller = poller
        self.seen = SeenSince()

    def stop(self) -> None:
        """Stop polling the workers' counters (a host app that mounts the page may call it at exit)."""
        self.poller.stop()


def create_app(
    app: Celery,
    *,
    allow_release: bool = False,
    allow_holds: bool = False,
    auth: Auth | None = None,
    secret_key: str | bytes | None = None,
    poll_interval: float = 5.0,
    history: int = 120,
    refresh: int = 0,
    hosts: Iterable[str] | None = None,
) -> Flask:
    """The page of ``app``'s locks, a WSGI app to serve or to mount under a path.

    Read-only unless ``allow_release`` (locks released) or ``allow_holds`` (calls held and holds
    lifted: ``ops.holds``). ``auth``: ``guard.parse_auth("user:password")`` or a
    token. ``secret_key`` signs the session cookie that keeps the CSRF token: give the same one
    to every process serving the page (by default each process draws its own). The workers'
    counters are polled every ``poll_interval`` seconds from the first view; the last
    ``history`` polls are charted. ``refresh``: seconds between the browser's reloads (0: none).
    ``hosts``: the only names the page answers to (the ``Host`` header, port aside; None: any).
    """
    web = Flask(__name__)
    web.config.update(
        SECRET_KEY=secret_key or secrets.token_bytes(32),
        # Its own name: a host Flask app's session cookie is left alone.
        SESSION_COOKIE_NAME="redislock_web",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        MAX_CONTENT_LENGTH=1024 * 1024,
    )
    poller = StatsPoller(app, CounterHistory(history), poll_interval)
    state = WebState(app, allow_release, auth, poller, allow_holds)
    web.extensions["redislock"] = state
    web.jinja_env.globals.update(
        csrf_field=CSRF_FIELD, csrf_token=csrf_token, allow_release=allow_release, allow_holds=allow_holds
    )
    web.jinja_env.filters["zip"] = zip
    web.jinja_env.filters["clock"] = _clock
    web.jinja_env.filters["breakable"] = breakable

    names = None if hosts is None else {host.lower() for host in hosts}

    @web.before_request
    def _authenticate() -> Response | None:
        # A page on localhost answers only to its own names: a site whose name a DNS rebinding
        # points at 127.0.0.1 would otherwise be same-origin with it, forms and tokens included.
        if names is not None and _host_name(request.host) not in names:
            abort(400, "this page answers only to the host names it was started for")
        if state.auth is not None and not state.auth.allows(request):
            return state.auth.challenge()
        if request.method == "POST" and not valid_csrf(request):
            abort(403, "missing or wrong CSRF token: reload the page and try again")
        return None

    web.after_request(harden)

    def redis_down(exc: Exception) -> Response:
        # One line naming the (masked) URL, as the CLI's commands say it; never a traceback.
        message, _ = redis_failure_text(runtime_for(app).settings, exc)
        return Response(message + "\n", 503, mimetype="text/plain")

    for error in REDIS_ERRORS:
        web.register_error_handler(error, redis_down)

    @web.get("/")
    def index() -> str:
        state.poller.start()
        task = request.args.get("task", "").strip() or None
        search = request.args.get("q", "")
        pages = {name: request.args.get(name, "1").strip() for name in ("lpage", "tpage")}
        sort = request.args.get("tsort", "backlog")
        problems = [
            check_task_filter(task) if task is not None else None,
            *(page_problem(name, value) for name, value in pages.items()),
            None
            if sort in TENANT_SORTS
            else f"tsort={sort!r} is not an order of the tenants (one of: {', '.join(TENANT_SORTS)})",
        ]
        problem = "; ".join(found for found in problems if found) or None
        runtime = runtime_for(app)
        shown = None
        if problem is None:
            shown = overview(
                runtime,
                app,
                task,
                search,
                MAX_ROWS,
                state.seen,
                rows=PAGE_ROWS,
                limit_page=int(pages["lpage"]),
                tenant_page=int(pages["tpage"]),
                tenant_sort=sort,
            )
        return render_template(
            "index.html",
            task=task or "",
            search=search,
            sorts=TENANT_SORTS,
            page_rows=PAGE_ROWS,
            problem=problem,
            shown=shown,
            charts=state.poller.history.charts(task),
            lateness=[row for row in state.poller.lateness if task is None or row.task == task],
            polls=len(state.poller.history.samples()),
            interval=state.poller.interval,
            refresh=refresh,
            max_rows=MAX_ROWS,
        )

    @web.get("/release")
    def confirm() -> str:
        _may_release(state)
        runtime = runtime_for(app)
        key = request.args.get("key")
        task = request.args.get("task")
        if key is not None:
            if task_of(key, runtime.settings.key_prefix, None) is None:
                abort(400, f"{key!r} is not a lock key of this app")
            rows = [
                row for row in lock_table(runtime, None, key, MAX_ROWS, state.seen).rows if row.key == key
            ]
        elif task:
            problem = check_task_filter(task)
            if problem:
                abort(400, problem)
            rows = lock_table(runtime, task, "", MAX_ROWS, state.seen).rows
        else:
            abort(400, "name a lock (key=...) or a task (task=...) to release")
        return render_template("confirm.html", rows=rows, key=key, task=task)

    @web.post("/release")
    def release() -> Any:
        _may_release(state)
        runtime = runtime_for(app)
        prefix = runtime.settings.key_prefix
        pairs = list(zip(request.form.getlist("key"), request.form.getlist("holder")))
        if not pairs:
            abort(400, "no lock to release")
        wanted: dict[str, list[str]] = {}
        for key, holder in pairs:
            if task_of(key, prefix, None) is None:
                abort(400, f"{key!r} is not a lock key of this app")
            wanted.setdefault(key, []).append(holder)
        released = sum(release_held(runtime, key, holders) for key, holders in wanted.items())
        asked = len(pairs)
        message = f"Released {released} of {asked} lock(s)"
        if released < asked:
            message += ": the others had expired or changed hands since"
        flash(message)
        back = {k: v for k, v in (("task", request.form.get("task", "")),) if v}
        return redirect(url_for("index") + (f"?{urlencode(back)}" if back else ""), 303)

    add_hold_routes(web, app, allow_holds)
    add_explain_view(web, app)
    return web


def _may_release(state: WebState) -> None:
    if not state.allow_release:
        abort(403, "releasing locks is not allowed here (start the page with --allow-release)")


def _clock(when: float) -> str:
    """A poll's time on a chart's axis: the time of day by the page process's clock."""
    return time.strftime("%H:%M:%S", time.localtime(when))


def _host_name(host: str) -> str:
    """The name of a ``Host`` header, without its port (``[::1]:8000``: ``::1``)."""
    host = host.lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
