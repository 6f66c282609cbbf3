"""What a redis-server binary is, read from its ``--version``: the servers a run tests against
(the suite's report header, the benchmarks' results) and the release command a test expects."""

from __future__ import annotations

import subprocess

from celery_redislock.contrib.testing import find_redis_server

__all__ = ["conditional_delete_of", "server_version"]


def server_version(executable: str | None = None) -> str:
    """What a server binary says it is: ``Redis 7.0.15``, ``Valkey 8.1.8``."""
    out = subprocess.run(
        [executable or find_redis_server(), "--version"], capture_output=True, text=True, timeout=10
    ).stdout
    # "Redis server v=7.0.15 sha=..." / "Valkey server v=8.1.8 sha=..."
    name, _, rest = out.partition(" server v=")
    return f"{name.strip()} {rest.split()[0]}" if rest else out.strip()


def conditional_delete_of(executable: str | None = None) -> str | None:
    """The command a server binary deletes a key with only if it holds a value, by its version
    (Valkey 9: ``delifeq``; Redis 8.4: ``delex``), or None: what a task's release should send
    there instead of the release script. Read from the version, not asked the way the package
    asks a server, so a test can check the package's answer."""
    name, _, version = server_version(executable).partition(" ")
    try:
        release = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    if name == "Valkey" and release >= (9, 0):
        return "delifeq"
    if name == "Redis" and release >= (8, 4):
        return "delex"
    return None
