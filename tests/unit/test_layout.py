"""The package's layout keeps its promises: a plain import costs nothing."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_maps_nothing_and_starts_no_thread() -> None:
    # A web process that only sends tasks imports celery_redislock: no file, no mapping, no
    # thread, no pytest, no test harness until a worker or a lock needs one.
    probe = """
import os, sys, threading
fds = set(os.listdir("/proc/self/fd"))
import celery_redislock
print(sorted(set(os.listdir("/proc/self/fd")) - fds), threading.active_count(),
      open("/proc/self/maps").read().count("memfd:"),
      sorted(m for m in sys.modules if m == "pytest" or m.startswith("celery_redislock.contrib")))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == "[] 1 0 []"
