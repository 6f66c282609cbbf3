"""This process's pid, read without a system call.

``os.getpid()`` is a real system call (about 200 ns here, and more in a busy pool child), and a
task's path asked for it three times: to notice a forked child (the direct connection, the
renewer). The pid is kept here instead, and set again by a fork hook in every forked child, the
same hook the renewer and the counters already rely on.
"""

from __future__ import annotations

import os

__all__ = ["pid"]

_pid = os.getpid()


def pid() -> int:
    """This process's pid (``os.getpid()``), as of its last fork."""
    return _pid


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
