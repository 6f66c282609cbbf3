"""Sphinx configuration of the celery_redislock documentation (MyST Markdown, furo)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The package from the checkout (autodoc), and the options/settings directives of docs/_ext.
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

from inventories import fetched_inventories  # noqa: E402
from sphinx.application import Sphinx  # noqa: E402

import celery_redislock  # noqa: E402

project = "celery_redislock"
author = "celery_redislock developers"
copyright = "celery_redislock developers"
release = celery_redislock.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "redislock_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# _fragments: included in pages (MyST include), no pages of their own.
exclude_patterns = ["_build", "_fragments", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
# Anchors for headings down to ###, so [text](page.md#a-heading) is checked by the build.
myst_heading_anchors = 3
# Links to pages and anchors stay internal references: a missing one is a warning, so the
# strict build (-W) is the internal link check.
myst_all_links_external = False

# Every internal reference must resolve (-W turns a miss into an error).
nitpicky = True

# Intersphinx needs the network. Read the Docs (READTHEDOCS is set there) and
# REDISLOCK_DOCS_INTERSPHINX=1 turn it on; off, the references to Python, Celery, kombu and
# redis-py are left as plain text. On, an inventory that cannot be fetched is left out the same
# way (docs/_ext/inventories.py): a site being down must not fail the strict build.
INTERSPHINX = (
    os.environ.get("REDISLOCK_DOCS_INTERSPHINX", "1" if os.environ.get("READTHEDOCS") else "0") == "1"
)
INVENTORIES = {
    "python": "https://docs.python.org/3/",
    "celery": "https://docs.celeryq.dev/en/stable/",
    "kombu": "https://docs.celeryq.dev/projects/kombu/en/stable/",
    "redis": "https://redis.readthedocs.io/en/stable/",
}
intersphinx_timeout = 30
intersphinx_mapping: dict[str, tuple[str, str]] = {}
if INTERSPHINX:
    _copies = Path(tempfile.mkdtemp(prefix="redislock-docs-inventories-"))
    atexit.register(shutil.rmtree, _copies, True)
    intersphinx_mapping = fetched_inventories(INVENTORIES, _copies, intersphinx_timeout)
# Every reference to this package's documented names must resolve. Names of other libraries
# (resolved by intersphinx when it is on) and the package's internal classes that appear in
# signatures and bases are not checked: the build would otherwise depend on the network.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!celery_redislock\.).*"),
    (r"py:.*", r"celery_redislock(\.\w+){3,}"),
]

# The pytest plugin's page is read from its code, but the docs extra (all Read the Docs
# installs) has no pytest: autodoc imports the plugin with a stand-in for it.
autodoc_mock_imports = ["pytest"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = "celery_redislock"
html_static_path: list[str] = []


def _own_module(app: Sphinx, modname: str, fullname: str) -> str | None:
    """viewcode imports a module to find where each of its names is defined, which the pytest
    plugin cannot be without pytest: its names are defined in it."""
    return modname if modname == "celery_redislock.contrib.pytest" else None


def setup(app: Sphinx) -> None:
    app.connect("viewcode-follow-imported", _own_module)
