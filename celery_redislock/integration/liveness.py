"""Whether a process of this host still runs: how a worker tells a dead delivery's lock (its
child gone) from a live one's."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["process_alive"]


def process_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host (signal 0 checks without sending); a
    zombie waiting for its parent to reap it is dead already."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (macOS): signal 0 is all we know
        return True
