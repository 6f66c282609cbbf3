"""The engine stands alone: importing it loads no Celery and nothing of the layers above it."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import celery_redislock.engine

ABOVE_THE_ENGINE = ("config", "integration", "modes", "ops", "compat", "contrib")


def test_importing_every_engine_module_loads_no_celery_and_no_layer_above_it() -> None:
    modules = [
        f"celery_redislock.engine.{m.name}" for m in pkgutil.iter_modules(celery_redislock.engine.__path__)
    ]
    assert "celery_redislock.engine.redis_lock" in modules  # the walk found the engine's modules
    probe = f"""
import importlib, sys
import celery_redislock.engine
for name in {modules!r}:
    importlib.import_module(name)
print("\\n".join(sorted(sys.modules)))
"""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = run.stdout.split()
    assert set(modules) <= set(loaded)
    assert [m for m in loaded if m.split(".")[0] in ("celery", "kombu", "click")] == []
    above = tuple(f"celery_redislock.{layer}" for layer in ABOVE_THE_ENGINE)
    assert [m for m in loaded if m.startswith(above)] == []
