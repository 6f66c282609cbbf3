"""examples/fencing_sqlite.py, run as a user runs it: the paused holder's late write is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_fencing_example_refuses_the_paused_holders_late_write() -> None:
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "examples/fencing_sqlite.py"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].endswith("its write applied: True"), done.stdout
    assert lines[2].endswith("applied: False"), done.stdout
    assert lines[3].startswith("the row now: ('written by the next holder', "), done.stdout
