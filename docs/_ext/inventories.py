"""The intersphinx inventories a build can use: each one fetched before the build starts and
handed to intersphinx as a local file, or left out when it cannot be fetched.

Intersphinx reports an inventory it cannot reach as a warning without a type, which no
``suppress_warnings`` entry can silence: under ``-W`` (Read the Docs' ``fail_on_warning``) a
site that is down, or a build host without the network, would fail the build. Left out, its
references stay plain text, as in an offline build.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

#: What an ``objects.inv`` starts with; anything else (an error page, a portal) is not one.
INVENTORY_HEADER = b"# Sphinx inventory version"


def fetched_inventories(sites: dict[str, str], folder: Path, timeout: float) -> dict[str, tuple[str, str]]:
    """``intersphinx_mapping`` for the ``sites`` (name: documentation URL ending in ``/``) whose
    ``objects.inv`` could be fetched now, each read from its copy in ``folder``; a line on
    stderr names each site left out and why."""
    mapping: dict[str, tuple[str, str]] = {}
    for name, url in sites.items():
        try:
            with urllib.request.urlopen(f"{url}objects.inv", timeout=timeout) as response:
                data = response.read()
        except (OSError, ValueError) as exc:  # URLError, HTTPError and timeouts are OSErrors
            _left_out(name, url, f"not fetched: {exc}")
            continue
        if not data.startswith(INVENTORY_HEADER):
            _left_out(name, url, "what it sent is not a Sphinx inventory")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / f"{name}-objects.inv"
        copy.write_bytes(data)
        mapping[name] = (url, str(copy))
    return mapping


def _left_out(name: str, url: str, why: str) -> None:
    print(f"intersphinx: {name} ({url}objects.inv) {why}; its references stay plain text", file=sys.stderr)
