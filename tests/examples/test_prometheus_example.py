"""examples/prometheus_metrics.py, run as a user runs it: its counters follow the signals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_prometheus_example_counts_duplicates_refused_at_send_by_task_and_strategy() -> None:
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "examples/prometheus_metrics.py"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        'redislock_duplicates_total{strategy="skip",task="example.send_report",where="enqueue"} 2.0'
        in done.stdout.splitlines()
    ), done.stdout
