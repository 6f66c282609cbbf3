"""A small chaos run (``benchmarks/chaos.py``): two prefork workers, children SIGKILLed and the
lock Redis restarted at random moments; nothing lost, no overlap outside a restart's window.

The full run (3000 tasks over 100 keys) is not part of the test suite: see docs/guarantees.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "chaos.py"


@pytest.mark.slow
def test_a_small_chaos_run_loses_nothing() -> None:
    out = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--tasks", "150", "--keys", "10",
            "--min-duration", "0.02", "--max-duration", "0.1",
            "--kill-every", "0.7", "--restart-every", "1.5", "--timeout", "240", "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(report)
    assert report["lost"] == 0, report
    assert report["overlaps_unexplained"] == 0, report
    assert report["ran"] + report["skipped"] == report["tasks_sent"] == 150, report
    assert report["failed_otherwise"] == 0, report
    assert out.returncode == 0
