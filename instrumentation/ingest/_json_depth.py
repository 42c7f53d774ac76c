"""The nesting depth of each line of a block of JSON text, without parsing it.

Arrow's JSON reader crashes the process (a native stack overflow) on lines nested some
ten thousand levels deep, and ``json.loads`` raises ``RecursionError``; the depth of every
line is therefore measured before either sees it. The scan is vectorised: the block is
reduced to its quotes, brackets and newlines in one C pass (``bytes.translate``), strings
without brackets in them vanish with a second (``""`` pairs), and numpy counts what is left.
"""

from __future__ import annotations

from typing import Final

import numpy as np

_KEEP: Final = b'"{}[]\n'
_DELETE: Final = bytes(b for b in range(256) if b not in _KEEP)
_OPEN, _CLOSE, _NEWLINE, _QUOTE = 1, -1, 2, 3


def _codes_table() -> bytes:
    table = bytearray(range(256))
    for char, code in ((b"{", _OPEN), (b"[", _OPEN), (b"}", _CLOSE), (b"]", _CLOSE)):
        table[char[0]] = code & 0xFF
    table[ord("\n")], table[ord('"')] = _NEWLINE, _QUOTE
    return bytes(table)


_TABLE: Final = _codes_table()


def line_depths(block: bytes) -> np.ndarray:
    """The deepest nesting of arrays and objects (outside strings) in each line of
    ``block`` (lines split at ``\\n``; a trailing newline starts no line)."""
    if b"\\" in block:
        # JSON escapes: a backslash pair, then an escaped quote, are never delimiters
        block = block.replace(b"\\\\", b"").replace(b'\\"', b"")
    # an adjacent pair of quotes closes and opens strings with no structure between them
    compact = block.translate(None, _DELETE).replace(b'""', b"")
    codes = np.frombuffer(compact.translate(_TABLE), np.int8)
    lines = block.count(b"\n") + (0 if block.endswith(b"\n") or not block else 1)
    if not len(codes):
        return np.zeros(lines, np.int64)
    newline = codes == _NEWLINE
    if b'"' in compact:
        inside = (np.cumsum(codes == _QUOTE, dtype=np.uint8) & 1).astype(bool)
        if inside[newline].any():  # a line with an unterminated string: measure each alone
            return np.array([_line_depth(line) for line in _lines(block)], np.int64)
        step = np.where(~inside & ((codes == _OPEN) | (codes == _CLOSE)), codes, 0)
    else:
        step = np.where(newline, 0, codes)
    depth = np.cumsum(step, dtype=np.int32)  # a block is far below 2**31 bytes
    ends = np.flatnonzero(newline)
    starts = np.concatenate(([0], ends[ends + 1 < len(codes)] + 1))
    base = np.where(starts > 0, depth[np.maximum(starts - 1, 0)], 0)
    per_line = np.maximum.reduceat(depth, starts) - base  # one segment per line, in order
    out = np.zeros(lines, np.int64)
    out[: len(per_line)] = np.maximum(per_line, 0)
    return out


def _lines(block: bytes) -> list[bytes]:
    parts = block.split(b"\n")
    return parts[:-1] if block.endswith(b"\n") else parts


def _line_depth(line: bytes) -> int:
    depths = line_depths(line.replace(b"\n", b""))
    return int(depths.max(initial=0))


def deep_lines(block: bytes, limit: int) -> list[tuple[int, int]]:
    """``(line index in the block, depth)`` of each line nested deeper than ``limit``."""
    if block.count(b"{") + block.count(b"[") <= limit:
        return []  # not enough brackets in the whole block to nest that deep
    depths = line_depths(block)
    return [(int(i), int(depths[i])) for i in np.flatnonzero(depths > limit)]
