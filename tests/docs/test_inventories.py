"""The intersphinx inventories a Read the Docs build uses (docs/_ext/inventories.py): one that
cannot be fetched, or that is not an inventory, is left out with a line saying so, never handed
to intersphinx, whose warning would fail the strict (-W) build. Against a real HTTP server on
loopback, and a port nothing listens on."""

from __future__ import annotations

import importlib.util
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = (
    b"# Sphinx inventory version 2\n# Project: x\n# Version: 1\n# The remainder is zlib\n"
    + zlib.compress(b"x.thing py:function 1 x.html#$ -\n")
)
PAGES = {"/good/objects.inv": INVENTORY, "/portal/objects.inv": b"<html>sign in first</html>"}


def load_inventories() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inventories", ROOT / "docs" / "_ext" / "inventories.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGES.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"not here")

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, name="inventory-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_only_the_inventories_fetched_are_handed_to_intersphinx(
    site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites = {
        "good": f"{site}/good/",
        "portal": f"{site}/portal/",  # answers, but not with an inventory
        "missing": f"{site}/missing/",  # 404
        "down": f"http://127.0.0.1:{free_port()}/",  # nothing listens
    }
    mapping = load_inventories().fetched_inventories(sites, tmp_path / "copies", timeout=10)

    assert mapping == {"good": (f"{site}/good/", str(tmp_path / "copies" / "good-objects.inv"))}
    assert (tmp_path / "copies" / "good-objects.inv").read_bytes() == INVENTORY
    said = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in said] == ["portal", "missing", "down"]
    assert all(line.endswith("its references stay plain text") for line in said)
