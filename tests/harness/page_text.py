"""The web page's HTML as a test reads it: each key and id joined back from the parts it may wrap
between (the page lets them wrap at their separators only)."""

from __future__ import annotations

import re


def unbroken(html: str) -> str:
    """``html`` without the markup that lets a key or an id wrap at its separators only."""
    return re.sub(r'<span class="seg">([^<]*)</span>', r"\1", html).replace("<wbr>", "")
