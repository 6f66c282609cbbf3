"""What the package ships for users' tests is what the testing page documents: every name
``celery_redislock.contrib.testing`` exports is on the page and in the API reference, and
nothing else is exported (the project's other harnesses are in tests/harness, out of the
wheel); every fixture of the pytest plugin is in the page's table, and the table has no other."""

from __future__ import annotations

import re
from pathlib import Path

from celery_redislock.contrib import pytest as plugin
from celery_redislock.contrib import testing

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_api_page_documents_every_export_and_no_other() -> None:
    api = (DOCS / "api.md").read_text()
    members = re.search(r"automodule:: celery_redislock\.contrib\.testing\n\s+:members: (.+)", api)
    assert members is not None, "docs/api.md: no automodule of celery_redislock.contrib.testing"
    assert sorted(name.strip() for name in members.group(1).split(",")) == sorted(testing.__all__)


def test_the_testing_page_names_every_export() -> None:
    page = (DOCS / "testing.md").read_text()
    missing = [name for name in testing.__all__ if not re.search(rf"`{name}[`(]", page)]
    assert missing == [], f"docs/testing.md does not name {missing}"


def test_the_fixture_table_is_the_plugin_s_fixtures() -> None:
    page = (DOCS / "testing.md").read_text()
    table = re.findall(r"^\| `(\w+)` \| (?:session|test) \|", page, re.M)
    assert sorted(table) == sorted(plugin.__all__)
