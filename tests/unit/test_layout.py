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


def test_the_celery_glue_imports_no_mode_no_gate_and_no_ops() -> None:
    # The glue dispatches to a plan's mode through integration.mode's protocol; the modes
    # register themselves. An import of a mode from the glue would tie them again.
    import ast
    from pathlib import Path

    import celery_redislock.integration as glue

    offending = []
    for path in Path(glue.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level < 2 or not node.module:
                continue  # not an import from above the glue's own folder
            if node.module.split(".")[0] in ("modes", "gates", "ops"):
                offending.append(f"{path.name}: from {'.' * node.level}{node.module}")
    assert offending == []


def test_loading_the_task_class_registers_the_peers_keywords() -> None:
    # celery-once's and celery-singleton's keywords are compat's knowledge, registered with the
    # task's keyword check when SingletonTask is loaded: a fresh process must refuse them too.
    probe = """
from celery import Celery
from celery_redislock import SingletonTask
from celery_redislock.errors import OptionError
app = Celery("probe", set_as_current=False)
try:
    @app.task(base=SingletonTask, shared=False, once={"keys": ["a"]})
    def f(a): ...
    f.name  # the decorator is lazy: the task is made (and bound) when first used
except OptionError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "option 'once' is a celery-once option, which SingletonTask ignores; write lock_key=['a']" in out
