"""``lock_until="started"`` (with ``lock_on="enqueue"``): unique while queued only. The lock
taken at send is freed when a worker starts the call, and the body runs unlocked, so one more
identical call can be queued while it runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from ..config.mode_rules import Clash
from ..config.schema import OptionSpec
from ..engine.checks import one_of
from ..integration.acquisition import Execution, release_queued
from ..integration.plain import PlainMode

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["LockUntil", "UntilStartedMode"]

#: How long a lock taken at enqueue lasts: until the task finished, or until a worker starts it.
LockUntil = Literal["finished", "started"]


class UntilStartedMode(PlainMode):
    name = "until_started"
    option = "lock_until"
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "lock_until",
            "finished",
            one_of(get_args(LockUntil)),
            "``finished``, or ``started`` (with ``lock_on='enqueue'``): unique while queued only.",
            "str",
            "until_started",
        ),
    )

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """The body runs unlocked, so it has no fencing token; the lock it frees at the start
        is the one taken at enqueue, so it needs ``lock_on="enqueue"``."""
        if options.get("lock_until") != "started":
            return None
        if options.get("fencing") is True:
            problem = "True cannot be used with lock_until='started' (the body runs unlocked)"
            return "fencing", problem, "lock_until"
        lock_on = options.get("lock_on")
        if lock_on is not None and lock_on != "enqueue":
            problem = (
                f"'started' cannot be used with lock_on={lock_on!r} (use lock_on='enqueue': only a lock "
                f"taken at enqueue can be released when the task starts)"
            )
            return "lock_until", problem, "lock_on"
        return None

    def selected_by(self, value: Any) -> bool:
        return bool(value == "started")

    def before_acquire(self, task: AnyTask, execution: Execution) -> None:
        return None  # no lock to ask for, so no redelivered copy to tell apart

    def acquire(self, task: AnyTask, execution: Execution) -> None:
        # Compare-and-delete of this call's own queued lock: another call's stays.
        release_queued(execution.runtime, execution.key, execution.task_id)


MODE = UntilStartedMode()
