"""examples/prometheus_metrics.py and examples/fencing_sqlite.py, run as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str) -> list[str]:
    """The lines ``python examples/<name>`` prints (it starts its own redis-server)."""
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, f"examples/{name}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_prometheus_example_counts_duplicates_refused_at_send_by_task_and_strategy() -> None:
    lines = run_example("prometheus_metrics.py")
    expected = 'redislock_duplicates_total{strategy="skip",task="example.send_report",where="enqueue"} 2.0'
    assert expected in lines, lines


def test_the_fencing_example_refuses_the_paused_holders_late_write() -> None:
    lines = run_example("fencing_sqlite.py")
    assert lines[1].endswith("its write applied: True"), lines
    assert lines[2].endswith("applied: False"), lines
    assert lines[3].startswith("the row now: ('written by the next holder', "), lines
