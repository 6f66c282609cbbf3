"""``throttle=SECONDS``: at most one run of a key starts per window. The run holds the key as a
lock (renewed, so two never overlap however long it runs); when it ends, the key is kept as
``{task id}@throttled`` until ``SECONDS`` after the run started, so calls inside the window are
duplicates (``on_duplicate``), and at send (``lock_on="enqueue"``) are answered with that run's
AsyncResult. A retried run keeps the window (its lock is handed to the retry)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from ..engine.checks import optional_seconds
from ..engine.counting import count
from ..engine.holders import tagged_id, task_id_of
from ..engine.leases import as_text
from ..engine.script_runner import ScriptRunner, package_script
from ..engine.timing import to_ms
from ..integration.acquisition import Holding, lost_at_release
from ..integration.plain import PlainMode

if TYPE_CHECKING:
    from ..integration.plain import AnyTask

__all__ = ["THROTTLE_END", "ThrottleMode", "end_window", "throttled_id"]

logger = logging.getLogger(__name__)

THROTTLE_END = package_script(__package__, "throttle_end.lua")


class ThrottleMode(PlainMode):
    name = "throttle"
    option = "throttle"
    retry_keeps_lock = True
    counters: ClassVar[Mapping[str, str]] = {
        "throttled": "calls refused inside a throttle's window, in the worker or at send",
    }
    options: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "throttle",
            None,
            optional_seconds,
            "Seconds: at most one run of a key starts per window of this length.",
            "float | None",
            "throttle",
        ),
    )

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        """The window is kept on one key, so not a semaphore's slots."""
        if options.get("throttle") is None:
            return None
        if limit > 1:
            return "throttle", f"cannot be used with max_concurrency={limit} (use 1)", "max_concurrency"
        return None

    def on_refused(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> NoReturn:
        count("throttled", task=task.name)
        super().on_refused(task, options, key, holder)

    def on_refused_at_send(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> None:
        count("throttled", task=task.name)

    def on_release(self, held: Holding) -> bool:
        """The run ended: keep its key for the rest of its window (released if none is left).

        The window is measured from the run's start on this process's monotonic clock and handed
        to Redis as a TTL (PX), so it ends on the server's clock whatever the hosts' wall clocks
        say. Raises ``redis.RedisError`` (the caller logs it: the key then expires on its lock
        TTL)."""
        lease, runtime = held.lease, held.runtime
        # The key lives exactly the rest of the window: no call may start before it ends, and
        # none is held back after it.
        window_ms = to_ms(held.options.value("throttle"))
        left_ms = window_ms - to_ms(time.monotonic() - held.started, minimum=0)
        keep_as = throttled_id(task_id_of(lease.holder))
        reply = end_window(
            runtime.scripts, lease.key, lease.holder, keep_as, left_ms, runtime.release_channel(lease.key)
        )
        if reply == 1:
            count("released")
        elif reply != 2:
            lost_at_release(lease)
        return True


def throttled_id(task_id: str) -> str:
    """The value a throttled key keeps after the run of ``task_id`` ended, for the rest of the
    window that run opened."""
    return tagged_id(task_id, "throttled")


def end_window(scripts: ScriptRunner, key: str, holder: str, keep_as: str, left_ms: int, notify: str) -> Any:
    """Keep ``key`` as ``keep_as`` for the ``left_ms`` left in its window (deleted, and published
    on ``notify``, if none is left) if ``holder`` still has it. Returns 2 kept, 1 deleted, else
    the current holder (or None: gone)."""
    reply = scripts.run(THROTTLE_END, [key], [holder, keep_as, str(max(0, left_ms)), notify])
    return reply if isinstance(reply, int) or reply is None else as_text(reply)


MODE = ThrottleMode()
