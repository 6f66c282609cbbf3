"""The pid the task's path reads instead of a getpid() system call: right in a forked child too."""

from __future__ import annotations

import os
from collections.abc import Callable

from celery_redislock.core import process


def test_the_pid_is_this_processes() -> None:
    assert process.pid() == os.getpid()


def test_a_forked_child_reads_its_own_pid(in_forked_child: Callable[[Callable[[], bool]], bool]) -> None:
    parent = process.pid()
    assert in_forked_child(lambda: process.pid() == os.getpid() != parent)
