"""Lua scripts read from a package's ``lua/`` folder (the engine's own, a mode's), and run for
the layers above the engine (the modes): registered once per client, every key of a call in one
cluster slot (the caller names them by ``keys.slot_key``)."""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

from .leases import Client

__all__ = ["ScriptRunner", "package_script"]


def package_script(package: str, name: str) -> str:
    """The Lua source ``lua/{name}`` of ``package`` (a mode's own scripts live beside it)."""
    return resources.files(package).joinpath("lua").joinpath(name).read_text(encoding="utf-8")


class ScriptRunner:
    """Runs any script on one client: each source registered on first use (EVALSHA, with
    redis-py's NOSCRIPT fallback), so a mode brings its script and nothing here names it."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._registered: dict[str, Any] = {}
        self._mutex = threading.Lock()

    def run(self, source: str, keys: list[str], args: list[str]) -> Any:
        """The reply of ``source`` run on ``keys`` (all of one slot) with ``args``."""
        script = self._registered.get(source)
        if script is None:
            with self._mutex:
                script = self._registered.setdefault(source, self.client.register_script(source))
        return script(keys=keys, args=args)
