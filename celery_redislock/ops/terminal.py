"""Text read from Redis (a key, a task or tenant name, a holder id), made safe to print on a
terminal: anyone who can write a key or send a call chooses these names, and a raw escape
sequence in one would move the cursor, erase or forge rows, or retitle the window."""

from __future__ import annotations

__all__ = ["printable"]

_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character a terminal would not print as itself (control and format
    characters, line separators, DEL) written as a Python escape (``\\x1b``, ``\\u202e``), and a
    backslash doubled, so that an escape shown is never taken for the name's own text."""
    if text.isprintable() and "\\" not in text:
        return text  # nearly every name: no copy
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
