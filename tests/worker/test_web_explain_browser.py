"""The page's explain view in a real browser (headless Chromium, as ``test_web_browser``): a task
id typed in the page's search box shows what the package decided about that call, newest
first; a call it never saw says so; an id with ``<script>`` is shown as text.

``REDISLOCK_EXPLAIN_SCREENSHOT=docs/_static/explain-view.png`` also saves the view as the docs
show it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

from celery_redislock.contrib.testing import WorkerProcess, poll

from .conftest import open_gate, wait_started, worker_module
from .test_web_browser import browser, element, no_alert  # noqa: F401 (the browser fixture)
from .web_harness import page_server_fixture  # noqa: F401 (the page_server fixture)

TASKS = """
@app.task(base=SingletonTask, bind=True, name="proj.report", lock_key=["name"], fencing=True)
def report(self, name):
    return hold(self, name)
"""


def rows(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, "#decisions tr.decision"))


def search(driver: Any, task_id: str) -> None:
    field = element(driver, "#explain-id")
    field.clear()
    field.send_keys(task_id)
    field.submit()


def test_the_explain_view_in_chromium_tells_a_skipped_call_and_a_running_one(
    worker_process: Callable[..., WorkerProcess],
    make_app: Callable[..., Celery],
    page_server: Callable[..., str],
    browser: Any,  # noqa: F811 (the fixture)
    urls: dict[str, str],
    coord: redis.Redis,
) -> None:
    proc = worker_process(worker_module(urls, "webexplain", TASKS), "-c", "2", pool="threads")
    module = str(proc.process.args[4])  # type: ignore[index]  # python -m celery -A <module> worker ...
    client = make_app()
    running = client.send_task("proj.report", kwargs={"name": "daily"})
    wait_started(coord, "daily")
    skipped = client.send_task("proj.report", kwargs={"name": "daily"})
    assert poll(lambda: skipped.state == "FAILURE", 30)  # skipped: its holder runs
    try:
        url = page_server(module)
        browser.get(url)
        search(browser, skipped.id)
        assert element(browser, "#explained-id").text == skipped.id
        [row] = rows(browser)
        assert "skipped" in row.get_attribute("class")
        assert f"skipped as a duplicate of {running.id}@" in row.text
        assert "(PENDING, still holds it)" in row.text
        shot = os.environ.get("REDISLOCK_EXPLAIN_SCREENSHOT")
        if shot:
            browser.save_screenshot(shot)

        search(browser, running.id)
        assert poll(lambda: element(browser, "#explained-id").text == running.id, 10)
        [taken] = rows(browser)
        assert "took the lock" in taken.text and "fencing token" in taken.text
        assert "still held by this call" in taken.text

        search(browser, "never-sent-<script>alert(1)</script>")
        assert "never saw this call" in element(browser, "#never-seen").text
        assert "<script>" in element(browser, "#explained-id").text  # as text, never run
        assert "<script>" not in browser.execute_script("return document.body.innerHTML.replace(/&lt;/g, '')")
        assert no_alert(browser)
    finally:
        open_gate(coord, "daily")
    assert running.get(timeout=30) == "done daily"
