"""The worker's Prometheus endpoint (``redislock_metrics_port``) on a real prefork worker: the
duplicates skipped in its children, counted by task, scraped over HTTP from the main process;
a lock held meanwhile shown by the gauges; a bad port refused at start."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_redislock.contrib.testing import poll
from celery_redislock.contrib.testing.servers import free_port

from .conftest import WorkerProcess, open_gate, skip_duplicates, wait_started, worker_module

pytest.importorskip("prometheus_client")

TASKS = """
app.conf.redislock_metrics_port = {port}


@app.task(base=SingletonTask, bind=True, name="metrics.held", lock_timeout=3)
def held(self, tag):
    return hold(self, tag)


@app.task(base=SingletonTask, name="metrics.quick")
def quick(n):
    return n
"""


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` of the worker as ``{'name{labels}': value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_skipped_duplicates_are_scraped_by_task_from_a_prefork_worker(
    urls: dict[str, str],
    coord: redis.Redis,
    make_app: Callable[..., Celery],
    worker_process: Callable[..., WorkerProcess],
) -> None:
    port = free_port()
    source = worker_module(urls, "metrics", TASKS.format(port=port))
    proc = worker_process(source, "-c", "2", "-n", f"metrics-{uuid.uuid4().hex[:8]}@test")
    client = make_app()
    assert [client.send_task("metrics.quick", args=[n]).get(timeout=15) for n in range(2)] == [0, 1]

    holder = client.send_task("metrics.held", args=["m"])
    try:
        [(holder_pid, _)] = wait_started(coord, "m")
        skip_duplicates(client, "metrics.held", "m", 3)
        # The holding child's renewal thread writes the gauges once a renewal interval (1 s).
        assert poll(lambda: scrape(port).get('redislock_locks_held{task="metrics.held"}') == 1, 15), scrape(
            port
        )
        assert scrape(port)['redislock_oldest_lock_age_seconds{task="metrics.held"}'] >= 0
        assert scrape(port)["redislock_renewal_latency_seconds_count"] >= 1
    finally:
        open_gate(coord, "m")
    assert holder.get(timeout=15) == "done m"
    assert holder_pid in proc.children

    def counted() -> bool:
        samples = scrape(port)
        return samples.get('redislock_released_total{task="metrics.held"}') == 1

    assert poll(counted, 15), scrape(port)
    samples = scrape(port)
    assert samples['redislock_skipped_total{task="metrics.held"}'] == 3
    assert samples['redislock_acquired_total{task="metrics.held"}'] == 1
    assert samples['redislock_acquired_total{task="metrics.quick"}'] == 2
    assert samples['redislock_skipped_total{task="metrics.quick"}'] == 0
    # Released, the gauges go once the next renewal cycle has run.
    assert poll(lambda: 'redislock_locks_held{task="metrics.held"}' not in scrape(port), 15), scrape(port)


def test_a_port_that_is_no_port_stops_the_worker_with_the_setting_named(
    urls: dict[str, str], tmp_path: object
) -> None:
    source = worker_module(urls, "badmetrics", TASKS.format(port='"9100"'))
    path = tmp_path / "badmetrics.py"  # type: ignore[operator]
    path.write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "badmetrics", "worker", "-P", "solo"],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78, done.stderr
    assert "redislock_metrics_port" in done.stderr and "'9100'" in done.stderr, done.stderr
