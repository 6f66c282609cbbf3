"""One object of a kind per process (a timer thread and what it serves): made on first use, made
again once it stopped, and forgotten in a forked child, which has none of the parent's threads."""

from __future__ import annotations

import os
import threading
from typing import Callable, Generic, Protocol, TypeVar

__all__ = ["PerProcess", "Stoppable"]


class Stoppable(Protocol):
    @property
    def stopped(self) -> bool: ...


T = TypeVar("T", bound=Stoppable)


class PerProcess(Generic[T]):
    """``get()`` returns this process's object, made by ``make`` when there is none or it stopped."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> T:
        value = self._value
        if value is not None and not value.stopped:  # the path of every call: no lock taken
            return value
        with self._lock:
            if self._value is None or self._value.stopped:
                self._value = self._make()
            return self._value

    def current(self) -> T | None:
        """This process's object if one was made (stopped or not), without making one."""
        return self._value

    def _forget(self) -> None:
        # The parent's lock may have been held by another of its threads at fork time.
        self._value = None
        self._lock = threading.Lock()
