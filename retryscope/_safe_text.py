"""Data values made safe to print: for a terminal, and for a cell of a markdown table.

Span data is written by whoever sends spans; a route name holding an escape sequence could
rewrite the terminal, one holding a newline or a pipe could forge a row of a report. Control
characters (C0, DEL, C1), line and paragraph separators and bidirectional overrides are
shown as ``\\xNN``/``\\uNNNN`` escapes; markdown syntax is backslash-escaped.
"""

from __future__ import annotations

import re
from typing import Final

_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_MARKDOWN: Final = re.compile(r"([\\|`\[\]<>])")
"""What can end a cell (a pipe, or a backslash before one), open code, a link or HTML;
emphasis (``*``, ``_``) only styles text and stays as it is."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


ECHO_MAX_CHARS: Final = 80
"""How much of a value given by a user (a URL parameter, a command-line filter) an error
message or a page repeats."""


def echoed(text: str, limit: int = ECHO_MAX_CHARS) -> str:
    """``text`` as a message repeats it: controls escaped (:func:`for_terminal`) and cut to
    ``limit`` characters, the cut said with the whole length."""
    shown = for_terminal(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}… ({len(shown):,} characters)"


def for_terminal(text: str) -> str:
    """``text`` with every control, separator and bidi character escaped."""
    return _UNSAFE.sub(_escape, text)


def for_markdown(text: str) -> str:
    """``text`` safe inside a markdown table cell: controls escaped (so no newline ends the
    row) and table, code, link and HTML syntax backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", for_terminal(text))
