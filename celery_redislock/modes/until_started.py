"""``lock_until="started"`` (with ``lock_on="enqueue"``): unique while queued only. The lock
taken at send is freed when a worker starts the call, and the body runs unlocked, so one more
identical call can be queued while it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.options import LockOptions
from ..integration.acquisition import Execution, release_queued
from ..integration.plain import PlainMode

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["UntilStartedMode"]


class UntilStartedMode(PlainMode):
    name = "until_started"

    def selects(self, options: LockOptions) -> bool:
        return options.lock_until == "started"

    def before_acquire(self, task: AnyTask, execution: Execution) -> None:
        return None  # no lock to ask for, so no redelivered copy to tell apart

    def acquire(self, task: AnyTask, execution: Execution) -> None:
        # Compare-and-delete of this call's own queued lock: another call's stays.
        release_queued(execution.runtime, execution.key, execution.task_id)


MODE = UntilStartedMode()
