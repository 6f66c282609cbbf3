"""Every Python block of the user guide runs, as a reader would run it, against a real
redis-server and a real ``celery worker`` (prefork) started for the page.

How a page's blocks are run (the convention the pages follow):

- A block captioned with a file name (```` ```{code-block} python ```` with ``:caption: tasks.py``)
  is that file of the page's project; blocks with one caption are joined in order.
- If the page has a ``tasks.py``, a ``celery -A tasks worker -P prefork -c 2`` runs in the
  project while the page's other blocks run.
- Every other ``python`` block runs in order, in one namespace, in a Python process of the
  page's own with the project folder importable (``from tasks import ...``, as a reader's
  script would).
- A ``text`` block captioned ``worker log`` lists lines the worker must have logged once the
  page's blocks ran; ``<...>`` in a line stands for any text.
- ``redis://localhost:6379`` in a block is the test's redis-server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from celery_redislock.contrib.testing import RedisServer, WorkerProcess, poll

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The user guide: the pages whose blocks a reader copies.
RUNNER = Path(__file__).resolve().parent / "run_blocks.py"
PAGES = sorted([DOCS / "getting-started.md", *(DOCS / "user-guide").glob("*.md")])

FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
LOCAL = "redis://localhost:6379"


@dataclass
class Block:
    language: str
    caption: str | None
    code: str
    line: int  # of the block's first line in the page, for error messages


@dataclass
class Page:
    files: dict[str, str] = field(default_factory=dict)
    calls: list[Block] = field(default_factory=list)
    expected_log: list[str] = field(default_factory=list)


def blocks(text: str) -> Iterator[Block]:
    """The fenced blocks of a MyST page: ```` ```python ```` or ```` ```{code-block} python ````
    (its ``:option: value`` lines read and left out of the code)."""
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        directive = re.fullmatch(r"\{code-block\}\s+(\S+)", info)
        language = directive.group(1) if directive else (info.split() or [""])[0]
        body = match["body"]
        caption = None
        line = text.count("\n", 0, match.start("body")) + 1
        if directive:
            lines = body.splitlines(keepends=True)
            while lines and lines[0].startswith(":"):
                name, _, value = lines.pop(0)[1:].partition(":")
                if name.strip() == "caption":
                    caption = value.strip()
                line += 1
            body = "".join(lines)
        yield Block(language, caption, body, line)


def read_page(path: Path, url: str) -> Page:
    page = Page()
    for block in blocks(path.read_text()):
        code = block.code.replace(LOCAL, url)
        if block.language == "python" and block.caption and block.caption.endswith(".py"):
            page.files[block.caption] = page.files.get(block.caption, "") + code + "\n"
        elif block.language == "python":
            page.calls.append(Block(block.language, block.caption, code, block.line))
        elif block.caption == "worker log":
            page.expected_log += [line for line in code.splitlines() if line.strip()]
    return page


def log_pattern(line: str) -> re.Pattern[str]:
    parts = re.split(r"<[^<>]*>", line.strip())
    return re.compile(".+?".join(re.escape(part) for part in parts))


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as redis_server:
        yield redis_server


@pytest.mark.parametrize("path", PAGES, ids=[str(path.relative_to(DOCS)) for path in PAGES])
def test_the_page_s_code_blocks_run(path: Path, server: RedisServer, tmp_path: Path) -> None:
    page = read_page(path, f"redis://127.0.0.1:{server.port}")
    if not page.calls and not page.files:
        pytest.skip(f"{path.name} has no Python block")
    for name, source in page.files.items():
        (tmp_path / name).write_text(source)
    worker = None
    try:
        if "tasks.py" in page.files:
            worker = WorkerProcess(tmp_path, "tasks", ["-P", "prefork", "-c", "2"])
            worker.wait_ready()
        if page.calls:
            run_calls(path, page.calls, tmp_path, worker)
        for line in page.expected_log:
            pattern = log_pattern(line)
            found = worker is not None and poll(lambda p=pattern: p.search(worker.log()) is not None, 10)
            assert found, f"{path.name}: the worker never logged {line!r}"
    finally:
        if worker is not None:
            worker.stop()
        with server.client() as client:
            client.flushall()


def run_calls(path: Path, calls: list[Block], project: Path, worker: WorkerProcess | None) -> None:
    """The page's caller blocks, in a Python process of their own (as a reader's script: no
    app or task of another page around), with the project importable."""
    page = str(path.relative_to(ROOT))
    script = project / "blocks.json"
    script.write_text(json.dumps([{"page": page, "line": block.line, "code": block.code} for block in calls]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(script)],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    log = f"\nworker log:\n{worker.log()[-3000:]}" if worker is not None else ""
    assert done.returncode == 0, f"{done.stderr[-4000:]}{log}"


def test_the_user_guide_has_blocks_to_run() -> None:
    # A page without a Python block is skipped above: this keeps a reader of fences that
    # stopped finding them from skipping every page.
    url = "redis://127.0.0.1:0"
    with_calls = [path.name for path in PAGES if read_page(path, url).calls]
    with_tasks = [path.name for path in PAGES if "tasks.py" in read_page(path, url).files]
    assert len(with_calls) >= 8, with_calls
    assert len(with_tasks) >= 7, with_tasks
