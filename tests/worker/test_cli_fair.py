"""``celery -A app redislock fair show``: each fair queue's tenants with a backlog, their lanes,
share and running calls, as text and as JSON; the backlog counted down as calls start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from celery_redislock.contrib.testing import poll

from .conftest import open_gate, wait_started, worker_module
from .mode_harness import Deployment, ModeTask, node
from .test_cli import Run

#: The task, as the celery program's module and the workers declare it.
TASK = ModeTask(
    "fair.cli",
    "tenant, n",
    'coord.rpush("starts", tenant)',
    {"fair_key": ["tenant"], "fair_cap": 2, "fair_lanes": 4},
)


@pytest.fixture
def celery(tmp_path: Path, urls: dict[str, str]) -> Run:
    """``celery("redislock", "fair", "show")`` runs the celery program on a module declaring
    the task as its workers do."""
    (tmp_path / "fairapp.py").write_text(worker_module(urls, "fairapp", TASK.source()))
    return Run("fairapp", tmp_path)


def test_fair_show_lists_each_tenants_backlog_lanes_and_share(
    celery: Run, coord: redis.Redis, deployment: Deployment
) -> None:
    assert (
        celery("redislock", "fair", "show")
        .stdout.strip()
        .endswith("celery  0 queued in 0 of 4 lanes  [lane:calls -]")
    )
    sender = TASK.sender(deployment.app())
    for n in range(6):
        sender.delay("acme", n)
    sender.delay("bravo", 0)
    result = celery("redislock", "fair", "show")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # Each in its hashed lane (hashed_lane: acme's is 2, bravo's 1), the tie of empty lanes.
    assert lines[0] == "celery  7 queued in 2 of 4 lanes  [lane:calls 1:1, 2:6]"
    assert lines[1] == "  acme: 6 queued in lane(s) 2:6, share 50%, 0 running"
    assert lines[2] == "  bravo: 1 queued in lane(s) 1:1, share 50%, 0 running"
    [shown] = json.loads(celery("redislock", "fair", "show", "--queue", "celery", "--json").stdout)
    assert shown["queue"] == "celery" and shown["lanes"] == 4 and shown["queued"] == 7
    assert [(t["tenant"], t["backlog"], t["running"]) for t in shown["tenants"]] == [
        ("acme", 6, 0),
        ("bravo", 1, 0),
    ]
    deployment.start(TASK, "-c", "1", "-n", node("fair-cli"))
    assert poll(lambda: coord.llen("starts") == 7, 60)
    assert poll(lambda: "0 queued in 0 of 4 lanes" in celery("redislock", "fair", "show").stdout, 20)


def test_fair_show_escapes_control_characters_of_tenant_names(celery: Run, deployment: Deployment) -> None:
    # Cursor up, erase the line, a forged row, a window title: printed raw, the row above goes.
    hostile = "evil\x1b[1A\x1b[2K  acme: 0 queued\n\x1b]0;pwned\x07"
    sender = TASK.sender(deployment.app())
    sender.delay("acme", 0)
    sender.delay(hostile, 0)
    result = celery("redislock", "fair", "show")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    assert lines[2].startswith("  evil\\x1b[1A\\x1b[2K  acme: 0 queued\\n\\x1b]0;pwned\\x07: 1 queued"), lines
    [shown] = json.loads(celery("redislock", "fair", "show", "--json").stdout)
    assert hostile in [tenant["tenant"] for tenant in shown["tenants"]]


def test_fair_reset_forgets_the_counts_a_purged_queue_left(celery: Run, deployment: Deployment) -> None:
    sender = TASK.sender(deployment.app())
    sender.delay("acme", 0)
    sender.delay("acme", 1)
    for lane in range(4):  # what `celery purge` does: the messages go, never run
        assert celery("purge", "-f", "-Q", f"celery.fair.{lane}").returncode == 0
    assert "celery  2 queued in 1 of 4 lanes" in celery("redislock", "fair", "show").stdout
    result = celery("redislock", "fair", "reset", "celery")
    assert result.returncode == 0 and result.stdout.strip() == "Reset the backlog counts of celery", (
        result.stderr
    )
    assert "celery  0 queued in 0 of 4 lanes" in celery("redislock", "fair", "show").stdout
    assert celery("redislock", "fair", "reset", "celery").stdout.strip() == "celery had no backlog counts"


def test_list_shows_a_tenants_cap_while_its_calls_run(
    celery: Run, coord: redis.Redis, deployment: Deployment
) -> None:
    held = ModeTask(
        "fair.cli", "tenant, n", "return hold(self, tenant)", {"fair_key": ["tenant"], "fair_cap": 2}
    )
    deployment.start(held, "-c", "2", "-n", node("fair-list"))
    sender = held.sender(deployment.app())
    calls = [sender.delay("acme", n) for n in range(2)]
    wait_started(coord, "acme", 2)
    listed = celery("redislock", "list").stdout
    [row] = [line for line in listed.splitlines() if "fair_cap" in line]
    assert "fair.cli" in row and "fair_cap: the running calls of one tenant" in row, listed
    open_gate(coord, "acme", 2)
    assert [call.get(timeout=30) for call in calls] == ["done acme"] * 2
