"""Anonymous memory a process shares with the children it forks, and a lock on it that a
killed holder cannot keep: what the worker's counters are kept in."""

from __future__ import annotations

import os
import sys
import tempfile

__all__ = ["anonymous_file", "lock_file", "unlock_file"]

if sys.platform == "win32":  # no fork there: the in-process lock alone is enough

    def lock_file(fd: int) -> None:
        pass

    def unlock_file(fd: int) -> None:
        pass

else:
    import fcntl

    # A POSIX record lock, not a multiprocessing.Lock: the kernel drops it when its holder
    # dies, so a child SIGKILLed mid-increment (hard time limit, OOM) cannot wedge the others.
    def lock_file(fd: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_EX)

    def unlock_file(fd: int) -> None:
        fcntl.lockf(fd, fcntl.LOCK_UN)


def anonymous_file(size: int) -> int:
    """A descriptor of ``size`` zero bytes that no path names (freed with its last process)."""
    if sys.platform == "linux":
        fd = os.memfd_create("celery_redislock-counters")
    else:
        fd, path = tempfile.mkstemp(prefix="celery_redislock-counters-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd
