"""Holder ids: built and parsed back, whatever the task id and the node name contain."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from celery_redislock.engine.holders import (
    BOOT_ID,
    any_delivery_prefix,
    handover_id,
    held_by_no_execution,
    holder_id,
    holder_prefix,
    local_pid,
    new_holder_id,
    queued_id,
    tagged_id,
    task_id_of,
    worker_of,
)
from celery_redislock.errors import DuplicateTaskError
from celery_redislock.integration.sending import seconds_until
from celery_redislock.modes.debounce import debounced_id
from celery_redislock.modes.keep_latest import latest_id
from celery_redislock.modes.throttle import throttled_id

TASK_IDS = ["3f2c1a9e-5b7d-4e0f-9a61-2d8c4b7e1f03", "job@42", "a@b@c", "%40", "100%", "@", "%2540@"]


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_every_holder_form_names_its_task_id(task_id: str) -> None:
    for holder in (holder_id(task_id, "celery@host"), queued_id(task_id), handover_id(task_id)):
        assert task_id_of(holder) == task_id
        assert holder.startswith(any_delivery_prefix(task_id))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_a_modes_own_forms_follow_the_grammar(task_id: str) -> None:
    # Each mode names its forms itself, through the engine's one tagged form.
    for form, tag in ((throttled_id, "throttled"), (latest_id, "latest"), (debounced_id, "debounced")):
        holder = form(task_id)
        assert holder == tagged_id(task_id, tag) and holder.endswith(f"@{tag}")
        assert task_id_of(holder) == task_id
        assert local_pid(holder, task_id, "celery@host") is None  # no execution's


def test_a_task_id_is_never_the_prefix_of_another_ones_holders() -> None:
    # Unescaped, "a" on node "x@h" and "a@x" on node "h" would both be "a@x@h:...".
    assert not holder_id("a@x", "h").startswith(any_delivery_prefix("a"))
    assert not holder_id("a", "x@h").startswith(any_delivery_prefix("a@x"))


def test_a_forked_child_draws_holder_ids_naming_its_own_pid(
    in_forked_child: Callable[[Callable[[], bool]], bool],
) -> None:
    holder_id("t", "celery@host")  # the parent has drawn one for this node: its pid is kept
    assert in_forked_child(
        lambda: local_pid(holder_id("t", "celery@host"), "t", "celery@host") == os.getpid()
    )


def test_only_this_worker_instances_holders_have_a_local_pid() -> None:
    mine = holder_id("t1", "shared@node")
    assert mine == f"t1@shared@node:{BOOT_ID}:{os.getpid()}:{mine.rsplit(':', 1)[1]}"
    assert local_pid(mine, "t1", "shared@node") == os.getpid()
    # The same node name on another host (another boot id), or written before boot ids.
    assert local_pid(f"t1@shared@node:0badc0de:{os.getpid()}:1", "t1", "shared@node") is None
    assert local_pid(f"t1@shared@node:{os.getpid()}:1", "t1", "shared@node") is None
    assert local_pid(mine, "t2", "shared@node") is None
    assert local_pid(queued_id("t1"), "t1", "shared@node") is None


def test_a_process_prefix_matches_that_process_holders_only() -> None:
    # The worker's parent frees a dead child's locks by this prefix: never one of a process
    # whose pid starts with the dead one's digits, nor one of another task id.
    mine = holder_id("t1", "celery@host")
    assert mine.startswith(holder_prefix("t1", "celery@host", os.getpid()))
    assert mine.startswith(holder_prefix("t1", "celery@host"))
    assert not mine.startswith(holder_prefix("t2", "celery@host", os.getpid()))
    assert not f"t1@celery@host:{BOOT_ID}:{os.getpid()}1:1".startswith(
        holder_prefix("t1", "celery@host", os.getpid())
    )


def test_seconds_until_reads_countdown_and_eta_as_celery_does() -> None:
    now = datetime.now(timezone.utc)
    assert seconds_until(5, now + timedelta(hours=1), timezone.utc) == 5  # a countdown wins
    assert 3590 < seconds_until(None, now + timedelta(hours=1), timezone.utc) <= 3600
    assert 3590 < seconds_until(0, (now + timedelta(hours=1)).isoformat(), timezone.utc) <= 3600
    naive = (now + timedelta(minutes=1)).replace(tzinfo=None)  # in the app's timezone (UTC here)
    assert 50 < seconds_until(None, naive, timezone.utc) <= 60
    assert seconds_until(None, now - timedelta(minutes=1), timezone.utc) == 0
    assert seconds_until(None, None, timezone.utc) == 0


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_a_duplicate_error_keeps_the_holders_task_id_through_a_result_backend(task_id: str) -> None:
    # A result backend (or a prefork child's failure) carries the error pickled: by its args.
    for holder in (holder_id(task_id, "celery@host"), queued_id(task_id), handover_id(task_id)):
        error = pickle.loads(pickle.dumps(DuplicateTaskError("t", "other", "k", holder, task_id_of(holder))))
        assert (error.holder, error.holder_task_id) == (holder, task_id)


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_held_by_no_execution_tells_queued_and_handed_over_locks_from_executions(task_id: str) -> None:
    assert held_by_no_execution(queued_id(task_id)) and held_by_no_execution(handover_id(task_id))
    assert not held_by_no_execution(holder_id(task_id, "celery@host"))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_worker_of_names_the_node_and_pid_of_an_execution_or_what_holds_it_instead(task_id: str) -> None:
    # What the web page shows in its Worker column.
    assert worker_of(holder_id(task_id, "celery@host-1")) == f"celery@host-1 (pid {os.getpid()})"
    assert worker_of(queued_id(task_id)) == "queued"
    assert worker_of(handover_id(task_id)) == "handover"
    assert worker_of(throttled_id(task_id)) == throttled_id(task_id).rsplit("@", 1)[1]
    host_pid = new_holder_id().split("@", 1)[1]
    assert worker_of(new_holder_id()) == f"{host_pid.rsplit(':', 1)[0]} (pid {os.getpid()})"
