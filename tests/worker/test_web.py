"""The web page (``celery_redislock.ops.web``) through Flask's test client, on a real redis-server:
what it shows, that Redis data stays text, that a release needs permission, a POST and the CSRF
token, and the counters it polls from a real worker."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from flask import Flask
from flask.testing import FlaskClient

from celery_redislock import SingletonTask
from celery_redislock.config.arguments import digest
from celery_redislock.engine.keys import format_key
from celery_redislock.integration.runtime import runtime_for
from celery_redislock.ops.web import create_app, parse_auth
from celery_redislock.ops.web.history import ALL_TASKS
from tests.harness import module_env, unbroken

from .conftest import poll
from .web_harness import answers, page_server_fixture  # noqa: F401 (the page_server fixture)

ADD = "proj.add"
REPORT = "proj.report"
XSS = "<script>alert(1)</script>"


def lock_key(task: str, name: str) -> str:
    return format_key("redislock", task, digest(name))


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app()


@pytest.fixture
def pages(app: Celery) -> Iterator[Callable[..., FlaskClient]]:
    """``pages(allow_release=True)``: a test client of a page of ``app`` made with those options."""
    made: list[Flask] = []

    def make(**options: Any) -> FlaskClient:
        page = create_app(app, **options)
        made.append(page)
        return page.test_client()

    yield make
    for page in made:
        page.extensions["redislock"].stop()


@pytest.fixture
def held(locks: redis.Redis) -> dict[str, str]:
    holders = {
        lock_key(ADD, "a"): "task-a@celery@host1:0badc0de:101:1",
        lock_key(ADD, "b"): "task-b@celery@host2:0badc0de:202:7",
        lock_key(REPORT, "c"): "task-c@handover",
    }
    for key, holder in holders.items():
        locks.set(key, holder, px=60_000)
    return holders


def text(response: Any) -> str:
    """The page's HTML, each key and id joined back from the parts it may wrap between."""
    return unbroken(str(response.get_data(as_text=True)))


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def test_the_page_lists_each_held_lock_with_its_task_holder_worker_and_ttl(
    pages: Callable[..., FlaskClient], held: dict[str, str]
) -> None:
    response = pages().get("/")
    assert response.status_code == 200
    page = text(response)
    for key in held:
        assert key in page
    assert "task-a" in page and "celery@host1 (pid 101)" in page
    assert "task-b" in page and "celery@host2 (pid 202)" in page
    assert "handover" in page  # a lock no execution holds names what holds it
    assert re.search(r"<td class=\"num\">(59|60)\.\d</td>", page)  # TTL left, in seconds


def test_filter_by_task_and_search_by_key(pages: Callable[..., FlaskClient], held: dict[str, str]) -> None:
    client = pages()
    by_task = text(client.get("/", query_string={"task": ADD}))
    assert lock_key(ADD, "a") in by_task and lock_key(ADD, "b") in by_task
    assert lock_key(REPORT, "c") not in by_task
    one = lock_key(ADD, "b")
    by_key = text(client.get("/", query_string={"q": one[-12:]}))
    assert one in by_key and lock_key(ADD, "a") not in by_key
    bad = text(client.get("/", query_string={"task": "a:b"}))
    assert "&#39;a:b&#39; is not a task name" in bad


def test_a_fenced_lock_shows_its_token_and_its_age_from_the_server_clock(
    pages: Callable[..., FlaskClient], app: Celery
) -> None:
    key = lock_key(REPORT, "fenced")
    taken = runtime_for(app).engine.acquire(key, "t1@celery@w:0badc0de:7:1", 60_000, fencing=True)
    assert taken.token is not None
    page = text(pages().get("/"))
    assert f'<td class="num">{taken.token}</td>' in page
    assert re.search(r'<td class="num">\d+s</td>', page)  # an age known, not "seen since" (>=)


def test_a_key_and_a_holder_with_markup_are_shown_as_text(
    pages: Callable[..., FlaskClient], locks: redis.Redis
) -> None:
    key = lock_key(XSS, "x")
    locks.set(key, f"{XSS}@celery@host:0badc0de:1:1", px=60_000)
    page = text(pages(allow_release=True).get("/"))
    assert XSS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    confirm = text(pages(allow_release=True).get("/release", query_string={"key": key}))
    assert XSS not in confirm and "&lt;script&gt;" in confirm


def test_the_page_sends_headers_that_run_no_script(pages: Callable[..., FlaskClient]) -> None:
    response = pages().get("/")
    assert "script-src" not in response.headers["Content-Security-Policy"]  # default-src 'none' rules
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"


def test_read_only_by_default_every_release_is_refused(
    pages: Callable[..., FlaskClient], held: dict[str, str], locks: redis.Redis
) -> None:
    client = pages()
    key = lock_key(ADD, "a")
    assert "Release" not in text(client.get("/"))
    assert client.get("/release", query_string={"key": key}).status_code == 403
    token = csrf_of(text(pages(allow_release=True).get("/release", query_string={"key": key})))
    response = client.post("/release", data={"key": key, "holder": held[key], "csrf_token": token})
    assert response.status_code == 403
    assert locks.get(key) == held[key].encode()


def test_a_release_is_confirmed_then_posted_with_the_csrf_token(
    pages: Callable[..., FlaskClient], held: dict[str, str], locks: redis.Redis
) -> None:
    client = pages(allow_release=True)
    key = lock_key(ADD, "a")
    confirm = client.get("/release", query_string={"key": key})
    assert confirm.status_code == 200 and locks.get(key) is not None  # a GET changes nothing
    token = csrf_of(text(confirm))
    form = {"key": key, "holder": held[key]}
    assert client.post("/release", data=form).status_code == 403  # no token
    assert client.post("/release", data={**form, "csrf_token": "forged"}).status_code == 403
    # Another browser (no session cookie) with this page's token: refused too.
    assert pages(allow_release=True).post("/release", data={**form, "csrf_token": token}).status_code == 403
    assert locks.get(key) == held[key].encode()
    done = client.post("/release", data={**form, "csrf_token": token}, follow_redirects=True)
    assert done.status_code == 200
    assert "Released 1 of 1 lock(s)" in text(done)
    assert locks.get(key) is None
    assert locks.get(lock_key(ADD, "b")) is not None


def test_a_release_leaves_a_lock_that_changed_hands_since_it_was_confirmed(
    pages: Callable[..., FlaskClient], held: dict[str, str], locks: redis.Redis
) -> None:
    client = pages(allow_release=True)
    key = lock_key(ADD, "a")
    token = csrf_of(text(client.get("/release", query_string={"key": key})))
    locks.set(key, "someone-else@celery@host3:0badc0de:3:1", px=60_000)
    done = client.post(
        "/release", data={"key": key, "holder": held[key], "csrf_token": token}, follow_redirects=True
    )
    assert "Released 0 of 1 lock(s): the others had expired or changed hands since" in text(done)
    assert locks.get(key) == b"someone-else@celery@host3:0badc0de:3:1"


def test_release_all_of_a_task(
    pages: Callable[..., FlaskClient], held: dict[str, str], locks: redis.Redis
) -> None:
    client = pages(allow_release=True)
    confirm = text(client.get("/release", query_string={"task": ADD}))
    assert "Release 2 lock(s)" in confirm and lock_key(REPORT, "c") not in confirm
    form = {"key": [lock_key(ADD, "a"), lock_key(ADD, "b")], "task": ADD, "csrf_token": csrf_of(confirm)}
    form["holder"] = [held[key] for key in form["key"]]
    assert "Released 2 of 2" in text(client.post("/release", data=form, follow_redirects=True))
    assert locks.get(lock_key(ADD, "a")) is None and locks.get(lock_key(ADD, "b")) is None
    assert locks.get(lock_key(REPORT, "c")) is not None


def test_a_post_naming_a_key_of_no_lock_of_the_app_is_refused(
    pages: Callable[..., FlaskClient], held: dict[str, str], locks: redis.Redis
) -> None:
    client = pages(allow_release=True)
    locks.set("other:key", "x")
    token = csrf_of(text(client.get("/release", query_string={"task": ADD})))
    response = client.post("/release", data={"key": "other:key", "holder": "x", "csrf_token": token})
    assert response.status_code == 400
    assert locks.get("other:key") == b"x"


@pytest.mark.parametrize(
    ("spec", "header", "allowed"),
    [
        ("ops:s3cret", "Basic " + base64.b64encode(b"ops:s3cret").decode(), True),
        ("ops:s3cret", "Basic " + base64.b64encode(b"ops:wrong").decode(), False),
        ("ops:s3cret", "Bearer s3cret", False),
        ("tok3n", "Bearer tok3n", True),
        ("tok3n", "Basic " + base64.b64encode(b"anyone:tok3n").decode(), True),
        ("tok3n", "Bearer nope", False),
        ("tok3n", None, False),
    ],
)
def test_auth(pages: Callable[..., FlaskClient], spec: str, header: str | None, allowed: bool) -> None:
    client = pages(auth=parse_auth(spec))
    response = client.get("/", headers={"Authorization": header} if header else {})
    assert response.status_code == (200 if allowed else 401)
    if not allowed:
        assert response.headers["WWW-Authenticate"].startswith("Basic ")


def test_the_page_charts_the_counters_it_polls_from_a_real_worker(
    app: Celery, pages: Callable[..., FlaskClient], worker: Callable[..., Any]
) -> None:
    @app.task(base=SingletonTask, shared=False, name="web.counted", lock_key=["n"])
    def counted(n: int) -> int:
        return n

    client = pages(poll_interval=0.5)
    state = client.application.extensions["redislock"]
    with worker(app, pool="solo", concurrency=1):
        for n in range(3):
            counted.delay(n).get(timeout=20)

        def polled_three() -> bool:
            # Under the task's name where the reply breaks the counters down per task, else
            # under ALL_TASKS (the worker's totals): either way three acquired.
            samples = state.poller.history.samples()
            counts = [
                totals.get(ALL_TASKS, totals.get("web.counted", {})).get("acquired", 0)
                for _, totals in samples
            ]
            return bool(counts) and max(counts) >= 3

        client.get("/")  # the first view starts the polling
        assert poll(polled_three, 30)
        page = text(client.get("/"))
    assert "<svg" in page and "<polyline" in page
    assert "acquired 3" in page


def app_module(tmp_path: Path, urls: dict[str, str]) -> str:
    """A module ``webapp`` of an app on the test's databases, for ``celery -A webapp``."""
    (tmp_path / "webapp.py").write_text(
        "from celery import Celery\n"
        f"app = Celery('webapp', broker={urls['broker']!r})\n"
        f"app.conf.redislock_url = {urls['locks']!r}\n"
    )
    return "webapp"


def test_the_web_command_asks_for_its_auth(
    tmp_path: Path, urls: dict[str, str], page_server: Callable[..., str]
) -> None:
    url = page_server(app_module(tmp_path, urls), "--auth", "tok3n")
    assert answers(url) == 401
    assert answers(url, {"Authorization": "Bearer nope"}) == 401
    assert answers(url, {"Authorization": "Bearer tok3n"}) == 200
    assert answers(url + "release?task=proj.add", {"Authorization": "Bearer tok3n"}) == 403  # read-only
    # Served on loopback, it answers to loopback names only: not to a rebound DNS name.
    port = url.rsplit(":", 1)[1].rstrip("/")
    assert answers(url, {"Authorization": "Bearer tok3n", "Host": f"localhost:{port}"}) == 200
    assert answers(url, {"Authorization": "Bearer tok3n", "Host": f"rebound.example:{port}"}) == 400


def test_the_web_command_refuses_an_auth_it_cannot_read(tmp_path: Path, urls: dict[str, str]) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app_module(tmp_path, urls),
            "redislock",
            "web",
            "--auth",
            "ops:",
        ],
        cwd=tmp_path,
        env=module_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--auth: give user:password (both non-empty) or a token, got 'ops:'" in done.stderr


def run_web(tmp_path: Path, urls: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A webapp redislock web *args`` run to its end (a refusal), REDISLOCK_WEB_AUTH unset."""
    env = {name: value for name, value in os.environ.items() if name != "REDISLOCK_WEB_AUTH"}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", app_module(tmp_path, urls), "redislock", "web", *args],
        cwd=tmp_path,
        env=module_env(tmp_path, env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "example.internal"])
def test_the_web_command_refuses_releases_on_a_network_address_without_auth(
    tmp_path: Path, urls: dict[str, str], host: str
) -> None:
    # Anyone who reaches it could read the CSRF token from a confirmation page and post it.
    done = run_web(tmp_path, urls, "--host", host, "--allow-release", "--port", "0")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--allow-release on --host {host} needs --auth" in done.stderr, done.stderr
    assert "celery_redislock web: http://" not in done.stdout  # nothing was served


def test_the_web_command_serves_releases_on_a_network_address_with_auth(
    tmp_path: Path, urls: dict[str, str], page_server: Callable[..., str]
) -> None:
    url = page_server(app_module(tmp_path, urls), "--host", "0.0.0.0", "--auth", "tok3n", "--allow-release")
    assert answers(url) == 401
    assert answers(url + "release?task=proj.add", {"Authorization": "Bearer tok3n"}) == 200


def test_web_without_the_extra_names_the_extra_to_install(tmp_path: Path, urls: dict[str, str]) -> None:
    app_module(tmp_path, urls)
    probe = (
        "import sys; sys.modules['flask'] = None; sys.modules['waitress'] = None\n"
        "import celery_redislock.ops.cli\n"  # the command group loads without the extra
        "from celery.bin.celery import main\n"
        "sys.argv = ['celery', '-A', 'webapp', 'redislock', 'web']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "pip install 'celery-redislock[web]'" in done.stderr, done.stderr


def test_mounted_under_a_path_of_a_host_flask_app_its_links_and_release_stay_under_it(
    app: Celery, held: dict[str, str], locks: redis.Redis
) -> None:
    # As docs/operations/web.md mounts it: werkzeug's DispatcherMiddleware under /locks.
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    host = Flask("host")
    host.secret_key = "host-secret"

    @host.get("/")
    def home() -> str:
        return "host home"

    page = create_app(app, allow_release=True, poll_interval=60)
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/locks": page})  # type: ignore[method-assign]
    client = host.test_client()
    assert text(client.get("/")) == "host home"
    listing = text(client.get("/locks/"))
    key = lock_key(ADD, "a")
    assert 'href="/locks/release?key=redislock' in listing and 'href="/locks/?task=proj.add"' in listing
    confirm = text(client.get("/locks/release", query_string={"key": key}))
    assert 'action="/locks/release"' in confirm
    form = {"key": key, "holder": held[key], "csrf_token": csrf_of(confirm)}
    done = client.post("/locks/release", data=form)
    assert done.status_code == 303 and done.headers["Location"].startswith("/locks/")
    page.extensions["redislock"].stop()
    assert locks.get(key) is None


def test_redis_unreachable_is_a_503_page_naming_the_masked_url(
    make_app: Callable[..., Celery], lock_server: Any
) -> None:
    url = f"redis://:hunter2@127.0.0.1:{lock_server.port}/0"
    page = create_app(make_app(redislock_url=url), poll_interval=60)
    client = page.test_client()
    assert client.get("/").status_code == 200
    lock_server.stop()
    response = client.get("/")
    page.extensions["redislock"].stop()
    assert response.status_code == 503
    assert f"Redis at redis://:****@127.0.0.1:{lock_server.port}/0 is unreachable" in text(response)
    assert "hunter2" not in text(response)


def test_the_rate_limit_partitions_are_shown_with_their_window_fill_reserved_and_next_free_slot(
    make_app: Callable[..., Celery], pages: Callable[..., FlaskClient], locks: redis.Redis
) -> None:
    from celery_redislock.engine.rate_decisions import Limit, decide_limits
    from celery_redislock.engine.rate_limiter import decide
    from celery_redislock.engine.rates import parse_rate, parse_rates
    from celery_redislock.engine.script_runner import ScriptRunner
    from celery_redislock.gates.rate_calls import named_log
    from celery_redislock.gates.rate_limit import rate_key

    app = make_app(redislock_options={"global_rate_limit": "3/m"}, redislock_limits={"partner": "3/m"})
    scripts = ScriptRunner(locks)
    busy = rate_key(lock_key(ADD, "acme"))
    partner = named_log("redislock", "partner")
    for caller in ("a", "b", "c", "d"):  # three start, the fourth reserves the next slot
        decide(scripts, busy, parse_rate("3/m"), caller, reserve=True)
        decide_limits(scripts, (Limit(partner, parse_rates("3/m"), "partner"),), caller, reserve=True)
    page = create_app(app, poll_interval=60)
    try:
        listing = text(page.test_client().get("/"))
    finally:
        page.extensions["redislock"].stop()
    modes = listing.split('<table id="modes">')[1].split("</table>")[0]
    assert (
        busy in modes and "rate limit 3/m: 3 started in the window, 1 reserved, next free slot in " in modes
    )
    assert partner not in modes  # its own row, below
    limits = listing.split('<table id="limits">')[1].split("</table>")[0]
    row = re.sub(r"\s+", " ", limits.split(partner)[1].split("</tr>")[0])
    # A bar of the window: 3 started of 3, and 1 reserved past them (the bar rescaled to 4).
    assert re.match(
        r'</code></td><td>3/m</td> <td> <div class="usage" role="img" aria-label="3 of 3 used, 1 reserved"> '
        r'<span class="bar"><span class="used" style="width: 75.0%"></span>'
        r'<span class="reserved" style="width: 25.0%"></span></span> '
        r'<span class="figures">3 / 3 in the window, 1 reserved</span> </div></td> '
        r'<td class="num">in \d+\.\d{3}s</td>',
        row,
    ), row


def test_a_burst_rate_shows_its_bucket_free_units_and_when_it_is_full_again(
    make_app: Callable[..., Celery], locks: redis.Redis
) -> None:
    from celery_redislock.engine.rate_decisions import Limit, decide_limits
    from celery_redislock.engine.rates import parse_rates
    from celery_redislock.engine.script_runner import ScriptRunner
    from celery_redislock.gates.rate_calls import named_log

    # 1/m: a unit refills every minute, so the state cannot change while the test reads it.
    app = make_app(redislock_limits={"llm": "1/m burst 5"})
    log = named_log("redislock", "llm")
    for caller in ("a", "b", "c"):
        limits = (Limit(log, parse_rates("1/m burst 5"), "llm"),)
        assert decide_limits(ScriptRunner(locks), limits, caller, reserve=False).allowed
    page = create_app(app, poll_interval=60)
    try:
        listing = text(page.test_client().get("/"))
    finally:
        page.extensions["redislock"].stop()
    bucket = re.search(
        r'<td>1/m burst 5</td>.*?<span class="bucket">(\d) of 5 free, full in ([\d.]+)s</span>', listing, re.S
    )
    assert bucket, listing
    assert bucket.group(1) == "2"
    assert 120 < float(bucket.group(2)) <= 180  # three units, a minute each, less the time taken


def test_the_fair_share_section_lists_the_waiting_tenants_as_text_and_is_left_out_without_a_fair_queue(
    app: Celery, pages: Callable[..., FlaskClient]
) -> None:
    # Calls sent and not started (no worker): their tenants wait, as `fair show` lists them.
    # Keys of its own: lanes other tests left counted (a queue whose lanes still hold calls is
    # listed, fair task or not) are not this page's.
    app.conf.redislock_key_prefix = f"web-fair-{uuid.uuid4().hex[:8]}"
    assert runtime_for(app).settings.key_prefix.startswith("web-fair-")
    assert "Fair share" not in text(pages().get("/"))  # no fair task: no section

    @app.task(base=SingletonTask, shared=False, name="web.fair", fair_key=["tenant"], fair_lanes=4)
    def fair(tenant: str, n: int) -> None: ...

    for n in range(3):
        fair.delay("<b>acme</b>", n)
    fair.delay("bravo", 0)
    page = text(pages().get("/"))
    tenants = re.sub(r"\s+", " ", page.split('<table id="tenants">')[1].split("</table>")[0])
    assert '<td>celery</td><td><code>&lt;b&gt;acme&lt;/b&gt;</code></td><td class="num">3</td>' in tenants
    assert (
        '<td>celery</td><td><code>bravo</code></td><td class="num">1</td> <td class="num">50%</td>' in tenants
    )


def test_given_its_host_names_the_page_answers_to_no_other(pages: Callable[..., FlaskClient]) -> None:
    client = pages(hosts=["localhost", "127.0.0.1", "::1"])
    for host in ("localhost", "LOCALHOST:8000", "127.0.0.1:8000", "[::1]:8000"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("rebound.example", "rebound.example:8000", "127.0.0.1.rebound.example"):
        assert client.get("/", headers={"Host": host}).status_code == 400, host
    assert pages().get("/", headers={"Host": "rebound.example"}).status_code == 200  # None: any name


def test_a_semaphores_holders_are_rows_of_their_own_and_released_together(
    app: Celery, pages: Callable[..., FlaskClient]
) -> None:
    # A max_concurrency key: a row per holder; its confirmation posts each, and each slot is given back.
    runtime = runtime_for(app)
    key = lock_key(REPORT, "sem")
    holders = ["s1@celery@w:0badc0de:1:1", "s2@celery@w:0badc0de:2:1"]
    for holder in holders:
        runtime.semaphores.acquire(key, holder, 3, 60_000)
    client = pages(allow_release=True)
    listing = text(client.get("/"))
    assert listing.count(f'<code class="key">{key}</code>') == 2
    confirm = text(client.get("/release", query_string={"key": key}))
    assert "Release 2 lock(s)" in confirm
    form = {"key": [key, key], "holder": holders, "csrf_token": csrf_of(confirm)}
    assert "Released 2 of 2" in text(client.post("/release", data=form, follow_redirects=True))
    assert runtime.semaphores.holders(key) == ()


def test_a_named_limit_without_a_partition_shows_its_rates_under_rate_and_no_heading_denies_a_partition(
    make_app: Callable[..., Celery], pages: Callable[..., FlaskClient], locks: redis.Redis
) -> None:
    from celery_redislock.engine.rate_decisions import Limit, decide_limits
    from celery_redislock.engine.rates import parse_rates
    from celery_redislock.engine.script_runner import ScriptRunner
    from celery_redislock.gates.rate_calls import named_log

    app = make_app(redislock_limits={"partner": "3/m", "idle": ["5/s", "20/m"]})
    partner = named_log("redislock", "partner")
    decide_limits(ScriptRunner(locks), (Limit(partner, parse_rates("3/m"), "partner"),), "a", reserve=True)
    page = create_app(app, poll_interval=60)
    try:
        listing = re.sub(r"\s+", " ", text(page.test_client().get("/")))
    finally:
        page.extensions["redislock"].stop()
    header = "<th>Named limit</th><th>Partition</th><th>Rate</th>"
    assert header in listing
    assert (
        '<td>idle</td> <td class="note">none in Redis yet</td><td>5/s, 20/m</td><td colspan="4"></td>'
        in listing
    )
    assert partner in listing.split('<table id="limits">')[1]
    # The modes' keys have none, and say so of themselves only: not "no rate-limit partition".
    assert "No rate-limit partition" not in listing
    assert listing.index('id="limits"') < listing.index('id="no-modes"')


def test_the_charts_have_a_time_axis_and_say_when_the_counters_restarted(
    pages: Callable[..., FlaskClient],
) -> None:
    import time

    client = pages(poll_interval=3600)
    history = client.application.extensions["redislock"].poller.history
    start = time.mktime((2026, 1, 2, 10, 0, 0, 0, 0, -1))
    for n, acquired in enumerate([0, 5, 9, 2, 4]):  # a worker restarted before the 4th poll
        history.add(start + 5 * n, {ADD: {"acquired": acquired}})
    page = text(client.get("/"))
    chart = page.split('aria-label="counters of proj.add"')[1].split("</svg>")[0]
    assert ">10:00:00</text>" in chart and ">10:00:20</text>" in chart  # the first and last poll
    assert 'class="restart"' in chart and "counters restarted at 10:00:15" in chart
    assert "Counters restarted at 10:00:15 (dashed)" in page
