"""examples/rate_limit.py, run as a user runs it: every call answered, each account at most at
its limit (and the second account not held up by the first), and RedisRateLimiter's two
acquires."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_rate_limit_example() -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "examples/rate_limit.py"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "15 calls, every one answered: 'acme/doc-0 synced' ...", lines
    acme, globex = lines[1].split(), lines[2].split()
    # 12 calls at 5 a second: 5 at once, the other 7 spread over the next two seconds.
    assert acme[:3] == ["acme:", "12", "ran"] and 1.3 < float(acme[4].rstrip("s,")) < 4.0, lines
    assert lines[1].endswith("at most 5 in any second"), lines
    assert globex[:3] == ["globex:", "3", "ran"] and float(globex[4].rstrip("s,")) < 1.0, lines
    assert lines[3] == "RedisRateLimiter 2/s: allowed, allowed, wait 1.0s; acquire() waited 1.0s", lines
    assert "Traceback" not in done.stderr, done.stderr
