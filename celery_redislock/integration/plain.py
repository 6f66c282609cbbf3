"""The plain mode, every task's unless a mode selects it, and the base the modes build on: a call
is sent as Celery sends it (or locked at enqueue), takes its key (``acquisition.acquire``), ends
as ``on_duplicate`` says when refused, and releases its key when the run ends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from celery.utils.dispatch import Signal

from ..config.mode_rules import Clash
from ..config.options import LockOptions
from ..config.schema import OptionSpec
from . import outcomes, sending
from .acquisition import Execution, Outcome, acquire
from .mode import Send, register
from .runtime import app_layers_ask

if TYPE_CHECKING:
    from celery import Task

    AnyTask = Task[Any, Any]

__all__ = ["PLAIN", "PlainMode"]


class PlainMode:
    """The ``Mode`` protocol's default hooks; a mode subclasses it and overrides its own."""

    name: ClassVar[str] = "plain"
    option: ClassVar[str | None] = None
    options: ClassVar[tuple[OptionSpec, ...]] = ()
    retry_keeps_lock: ClassVar[bool] = False
    key_suffixes: ClassVar[Mapping[str, str]] = {}
    counters: ClassVar[Mapping[str, str]] = {}
    signals: ClassVar[Mapping[str, Signal]] = {}
    #: Whether the mode sends its calls its own way (``send``), so a call of a task that may
    #: select it goes through its plan (``sends_through``); False: the plain ``send`` serves it.
    own_send: ClassVar[bool] = False

    def selected_by(self, value: Any) -> bool:
        return value is not None

    def selects(self, options: LockOptions) -> bool:
        option = self.option
        return option is not None and self.selected_by(options.value(option))

    def describe_key(
        self, runtime: Any, key: str, task_name: str, suffix: str, value: str | None
    ) -> str | None:
        return None if value is None else self.key_suffixes[suffix].format(value)

    def sends_through(self, task: Any) -> bool:
        """Whether the task's own ``option`` selects a mode with its ``own_send``, or (unset
        there) any app or queue layer's may; False for any other mode."""
        option = self.option
        if option is None or not self.own_send:
            return False
        own = getattr(task, option, None)
        if own is not None:
            return self.selected_by(own)
        return app_layers_ask(task.app, option, self.selected_by)

    def clash(self, options: Mapping[str, Any], limit: int, *, merged: bool) -> Clash | None:
        return None

    def send(self, call: Send) -> Any:
        return sending.send(call)

    def before_acquire(self, task: AnyTask, execution: Execution) -> None:
        # The running request, as the glue passed it: task.request walks Celery's request stack.
        request = execution.request
        if execution.retries or outcomes.redelivered(task.request if request is None else request):
            # A re-queued copy of a redelivered message whose original may have finished
            # meanwhile, or a message given out again after its run ended (the worker died
            # before the ack): its lock is free, only the result backend knows it ran.
            outcomes.drop_finished(task)

    def acquire(self, task: AnyTask, execution: Execution) -> Outcome | None:
        return acquire(execution)

    def on_refused(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> NoReturn:
        outcomes.on_duplicate(task, options, key, holder)

    def on_refused_at_send(self, task: AnyTask, options: LockOptions, key: str, holder: str) -> None:
        return None

    def on_release(self, held: Any) -> bool:
        return False


PLAIN = PlainMode()
register(PLAIN, default=True)
