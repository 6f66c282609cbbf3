"""The web page in a real browser: headless Chromium (Debian's chromium and chromium-driver, driven
by selenium, nothing downloaded) on the page ``celery redislock web`` serves, while a real worker
holds the locks: list, filter, release with confirmation, a key with ``<script>`` shown as text.

``REDISLOCK_WEB_SCREENSHOT=docs/_static/web-page.png`` also saves the page as the docs show it."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import SingletonTask
from celery_redislock.contrib.testing import WorkerProcess

from .conftest import open_gate, poll, wait_started, worker_module
from .web_harness import page_server_fixture  # noqa: F401 (the page_server fixture)

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMEDRIVER) and os.path.exists(CHROMIUM)),
    reason="needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver",
)

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

XSS_TASK = "proj.<script>alert(1)</script>"

TASKS = f"""
@app.task(base=SingletonTask, bind=True, name="proj.report", lock_key=["name"], fencing=True)
def report(self, name):
    return hold(self, name)


@app.task(base=SingletonTask, bind=True, name={XSS_TASK!r}, lock_key=["name"])
def odd(self, name):
    return hold(self, name)
"""


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def element(driver: Any, css: str) -> Any:
    """The element ``css`` selects, once the page navigated to shows it (a click returns before
    the next page has loaded)."""
    return WebDriverWait(driver, 20).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def lock_rows(driver: Any) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, "#locks tr.lock"))


def no_alert(driver: Any) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 (raises when there is none)
    except NoAlertPresentException:
        return True
    return False


def test_the_page_in_chromium_lists_filters_and_releases_with_confirmation(
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
    page_server: Callable[..., str],
    browser: Any,
    urls: dict[str, str],
    coord: redis.Redis,
    locks: redis.Redis,
) -> None:
    proc = worker_process(worker_module(urls, "webbrowser", TASKS), "-c", "3", pool="threads")
    module = proc.process.args[4]  # python -m celery -A <module> worker ...
    client = make_app()
    client.send_task("proj.report", kwargs={"name": "daily"})
    client.send_task(XSS_TASK, kwargs={"name": "odd"})
    wait_started(coord, "daily")
    wait_started(coord, "odd")
    [report_key] = [key.decode() for key in locks.scan_iter("redislock:proj.report:*")]
    [odd_key] = [key.decode() for key in locks.scan_iter("redislock:proj.<*")]
    try:
        url = page_server(module, "--allow-release", "--poll-interval", "0.5")
        browser.get(url)
        assert len(lock_rows(browser)) == 2
        keys = [element.text for element in browser.find_elements(By.CSS_SELECTOR, "#locks code.key")]
        assert sorted(keys) == sorted([report_key, odd_key])  # the <script> key, as text
        assert browser.find_elements(By.TAG_NAME, "script") == []
        assert no_alert(browser)
        assert "proj.report" in browser.find_element(By.ID, "locks").text
        # A duplicate skipped by the worker: the page, polling it, counts it.
        client.send_task("proj.report", kwargs={"name": "daily"})
        assert poll(
            lambda: "skipped 1" in (browser.get(url) or browser.find_element(By.TAG_NAME, "body").text), 30
        )
        shot = os.environ.get("REDISLOCK_WEB_SCREENSHOT")
        if shot:  # a few more polls, for a chart with a history
            polls = re.compile(r"(\d+) poll\(s\) kept")
            poll(lambda: int(polls.findall(browser.get(url) or browser.page_source)[0]) >= 12, 30)
            browser.save_screenshot(shot)

        # Filter by task: only its lock is left.
        field = browser.find_element(By.ID, "task")
        field.clear()
        field.send_keys("proj.report")
        field.submit()
        assert poll(lambda: len(lock_rows(browser)) == 1, 10)
        assert report_key in browser.find_element(By.ID, "locks").text

        # Release with confirmation: the link asks, the button posts (with the CSRF token).
        browser.find_element(By.CSS_SELECTOR, "#locks a.release").click()
        assert report_key in element(browser, "#confirm").text
        assert locks.get(report_key) is not None  # asking changed nothing
        browser.find_element(By.ID, "confirm-release").click()
        assert "Released 1 of 1 lock(s)" in element(browser, "p.flash").text
        assert locks.get(report_key) is None
        assert locks.get(odd_key) is not None
        assert no_alert(browser)
    finally:
        open_gate(coord, "daily")
        open_gate(coord, "odd")


def test_keys_and_ids_wrap_at_their_separators_only_a_part_wider_than_the_window_scrolls(
    page_server: Callable[..., str], browser: Any, urls: dict[str, str], locks: redis.Redis, tmp_path: Any
) -> None:
    (tmp_path / "webwrap.py").write_text(worker_module(urls, "webwrap", ""))
    key = "redislock:proj.tasks.nightly_report:2e7d2c03a9507ae265ecf5b5356885a5"
    locks.set(key, "3f2c1a9e-5b7d-4e0f-9a61-2d8c4b7e1f03@celery@worker1:5d2f8b13:4242:1", px=60_000)
    browser.set_window_size(420, 800)
    browser.get(page_server("webwrap"))
    shown = element(browser, "#locks code.key")
    assert shown.text.replace("\n", "") == key
    rects = "return arguments[0].getClientRects().length"
    # An inline element broken over lines has a box per line: the key is, at its ':' only; the
    # hex digest and the task id (with its '-') are never.
    assert browser.execute_script(rects, shown) > 1
    parts = shown.find_elements(By.CSS_SELECTOR, ".seg")
    assert [part.text for part in parts] == [
        "redislock:",
        "proj.tasks.nightly_report:",
        key.rsplit(":", 1)[1],
    ]
    for part in browser.find_elements(By.CSS_SELECTOR, "#locks code .seg"):
        assert browser.execute_script(rects, part) == 1, part.text
    # Copied, the key is whole: no space or line break where it wrapped.
    copied = browser.execute_script("return arguments[0].textContent", shown)
    assert copied == key


OPS_TASKS = """
app.conf.redislock_limits = {"partner": "3/m"}


@app.task(base=SingletonTask, name="proj.sync", rate_limits=["partner"])
def sync(n):
    return n


@app.task(base=SingletonTask, name="proj.ping", global_rate_limit="2/s")
def ping(n):
    return n


@app.task(base=SingletonTask, name="proj.reindex", debounce=0.3)
def reindex(key):
    return key
"""


def _never_run(key: str) -> None:
    raise AssertionError("the worker runs it")


def test_the_page_in_chromium_shows_each_limits_use_and_how_late_postponed_calls_started(
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
    page_server: Callable[..., str],
    browser: Any,
    urls: dict[str, str],
) -> None:
    proc = worker_process(worker_module(urls, "webops", OPS_TASKS), "-c", "2")
    module = proc.process.args[4]  # python -m celery -A <module> worker ...
    client = make_app()
    # Five calls of a 3/m limit: three start, two wait for slots reserved a minute on (which
    # three is the two pool processes' race, not the order sent: seen red waiting for the third).
    synced = [client.send_task("proj.sync", args=[n]) for n in range(5)]
    assert poll(lambda: sum(call.successful() for call in synced) == 3, 60)
    waiting = [call for call in synced if not call.successful()]
    # Put off and started later: two pings for their slots, a debounced burst's last call.
    pings = [client.send_task("proj.ping", args=[n]) for n in range(4)]
    reindex = client.task(base=SingletonTask, name="proj.reindex", debounce=0.3, shared=False)(_never_run)
    burst = [reindex.delay("catalog") for _ in range(3)]
    assert [call.get(timeout=60) for call in pings] == [0, 1, 2, 3]
    assert burst[-1].get(timeout=30) == "catalog"

    browser.set_window_size(1400, 1600)
    url = page_server(module, "--poll-interval", "0.5")

    def lateness_shown() -> bool:
        browser.get(url)
        found = browser.find_elements(By.CSS_SELECTOR, "#lateness")
        return bool(found) and "proj.ping" in found[0].text and "proj.reindex" in found[0].text

    assert poll(lateness_shown, 30), browser.find_element(By.TAG_NAME, "body").text
    rows = {
        tuple(cell.text for cell in row.find_elements(By.TAG_NAME, "td")[:3])
        for row in browser.find_elements(By.CSS_SELECTOR, "#lateness tr")[1:]
    }
    assert rows == {("proj.ping", "rate_limit", "2"), ("proj.reindex", "debounce", "1")}, rows
    [usage] = browser.find_elements(By.CSS_SELECTOR, "#limits .usage")
    assert usage.get_attribute("aria-label") == "3 of 3 used, 2 reserved"
    assert "3 / 3 in the window, 2 reserved" in usage.text
    widths = [
        browser.execute_script("return arguments[0].getBoundingClientRect().width", bar)
        for bar in usage.find_elements(By.CSS_SELECTOR, ".used, .reserved")
    ]
    assert widths[0] > widths[1] > 0  # three started, two reserved: drawn 3:2
    assert "in " in browser.find_element(By.ID, "limits").text  # the next free slot, a minute on
    shot = os.environ.get("REDISLOCK_WEB_OPS_SCREENSHOT")
    if shot:
        browser.save_screenshot(shot)
    for call in waiting:
        call.revoke()
