"""examples/demo.py end to end, run as a user runs it: a subprocess starting its own Redis and worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Columns of the demo's tally rows: label, calls, sent, ran, skipped, raised, how duplicates
#: are handled.
ROW = re.compile(r"^  (\S.*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)(?:  (.*))?$")


def running(pid: int) -> bool:
    """True if ``pid`` is a live process (a zombie nobody has reaped yet is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False  # gone between the two checks


@pytest.mark.slow
def test_the_demo_shows_skipped_duplicates_counts_that_add_up_and_stops_what_it_started() -> None:
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "examples/demo.py"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, f"demo exited with {done.returncode}\n{out}\n{done.stderr}"
    assert "Every call ran or was refused as a duplicate" in out

    rows = {m[1]: m for line in out.splitlines() if (m := ROW.match(line))}
    assert set(rows) == {
        "rebuild_index(1)",
        "send_report(7, pdf|csv)",
        "import_feed('prices')",
        "refresh_cache('home')",
        "nightly_export('2024-06-01')",
        "send_digest('ops')",
        "render_preview(3, v0..v3)",
        "reindex_document(4, v0..v3)",
        "total",
    }, out
    calls, sent, ran, skipped, raised = (
        sum(int(rows[label][i]) for label in rows if label != "total") for i in (2, 3, 4, 5, 6)
    )
    assert (calls, sent, ran, skipped, raised) == tuple(int(rows["total"][i]) for i in (2, 3, 4, 5, 6))
    for label, row in rows.items():
        assert int(row[4]) + int(row[5]) + int(row[6]) == int(row[3]), (
            f"{label}: ran + refused != sent\n{out}"
        )
    assert skipped >= 1, out
    # on_duplicate="raise": its duplicates failed, and are not counted as skipped; no other raised.
    feed = rows["import_feed('prices')"]
    assert (feed[4], feed[5], feed[6]) == ("1", "0", "2") and raised == 2, out
    # lock_on="enqueue": four calls, one message.
    assert (rows["nightly_export('2024-06-01')"][2], rows["nightly_export('2024-06-01')"][3]) == ("4", "1")
    assert out.count("Not sending duplicate proj.tasks.nightly_export") == 3
    # The dedup modes: throttle runs one, keep_latest the first and the latest, debounce the last.
    assert rows["send_digest('ops')"][4] == "1", out
    assert rows["render_preview(3, v0..v3)"][4] == "2", out
    assert rows["reindex_document(4, v0..v3)"][4] == "1", out

    # The worker's own lines: one per skipped duplicate.
    skip_lines = re.findall(r"^  Skipped duplicate proj\.tasks\.\w+\[.*is held by .*$", out, re.M)
    assert len(skip_lines) == skipped >= 1, out

    # The CLI listed the locks while the tasks ran, as the demo says it ran it; a time is an
    # age, not an epoch in milliseconds.
    assert "(celery -A proj redislock list --json, as a table; ids shortened)" in out
    held = re.search(r"^  (\d+) lock\(s\) held(?:, \d+ mode key\(s\))?$", out, re.M)
    assert held and int(held[1]) >= 1, out
    assert "server ms" not in out and not re.search(r"\d{13}", out), out

    # Everything it started, stopped: the worker, its pool and redis-server.
    worker = re.search(r"^Stopped the worker \(pid (\d+); pool pids ([\d, ]+)\)\.$", out, re.M)
    server = re.search(r"^Stopped redis-server \(pid (\d+)\)\.$", out, re.M)
    assert worker and server, out
    pids = [int(worker[1]), int(server[1]), *(int(pid) for pid in worker[2].split(", "))]
    assert len(pids) == 4  # the worker, redis-server and the two pool processes
    assert [pid for pid in pids if running(pid)] == []
