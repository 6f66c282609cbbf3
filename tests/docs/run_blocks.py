"""Runs a page's caller blocks in order, in one namespace, as a reader's script would:
``python run_blocks.py blocks.json`` (a list of ``{"page", "line", "code"}``). A failing block
prints its traceback, whose line numbers are the page's, and exits 1."""

from __future__ import annotations

import json
import sys
import traceback


def main(path: str) -> int:
    namespace: dict[str, object] = {"__name__": "__main__"}
    with open(path) as file:
        blocks = json.load(file)
    for block in blocks:
        # Padded so a traceback's line numbers are the page's.
        source = "\n" * (block["line"] - 1) + block["code"]
        try:
            exec(compile(source, block["page"], "exec"), namespace)
        except BaseException:
            print(f"the block at {block['page']}:{block['line']} failed:", file=sys.stderr)
            traceback.print_exc()
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
