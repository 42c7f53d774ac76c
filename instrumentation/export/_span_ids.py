"""Trace and span ids of SDK spans as lowercase hex text, a batch at a time.

An id is an ``int``; its text is ``format(id, "032x")`` (trace) or ``"016x"`` (span). Span
ids (64 bits) go through C loops in one step each way — the ids into a ``uint64`` array
(the :mod:`array` module's, which numpy then reads in place), its big-endian bytes into
hex — and the text becomes an Arrow string column directly, with no Python string per id.
Trace ids (128 bits) do not fit numpy's integers; a batch holds several spans of each
trace, so each distinct trace id is formatted once. An id out of range (a hand-made
context) is formatted as wide as it takes, as ``format`` does.
"""

from __future__ import annotations

import array
import binascii
import operator
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa

from retryscope.instrumentation.export import _constant_arrays as constant_arrays


def hex_ids(ids: Sequence[int], width: int) -> list[str]:
    """Lowercase hex of each id, ``width`` bytes wide (``format(i, "032x")`` for 16); each
    distinct id is formatted once (a batch holds several spans of each trace)."""
    distinct = list(dict.fromkeys(ids))
    try:  # map() over C functions: no Python frame per id
        text = map(bytes.hex, map(operator.methodcaller("to_bytes", width, "big"), distinct))
        hexes = dict(zip(distinct, text, strict=True))
    except OverflowError:  # an id out of range (a hand-made context): as wide as it takes
        hexes = {i: format(i, f"0{2 * width}x") for i in distinct}
    return list(map(hexes.__getitem__, ids))


_SPAN_ID_DIGITS = 16
_WORD: Final = "Q" if array.array("Q").itemsize == 8 else "L"
"""The :mod:`array` type code of an unsigned 64-bit integer."""


def span_id_column(ids: Sequence[int], present: Sequence[bool] | None = None) -> pa.Array:
    """The Arrow string column of 64-bit span ids as 16 hex digits.

    ``ids`` holds one id per row, or with ``present`` (one flag per row) one id per row
    whose flag is true: the other rows are null (spans without a parent).
    """
    rows = len(ids) if present is None else len(present)
    if present is not None and len(ids) == 0:
        return constant_arrays.nulls(rows, pa.string())
    if not set(map(type, ids)) <= {int}:  # (numpy would truncate a float, take a bool)
        return _formatted(ids, present)
    try:  # (the array module's C loop: numpy would discover a dtype per value)
        words = np.frombuffer(array.array(_WORD, ids), dtype=np.uint64)
    except (OverflowError, TypeError, ValueError):  # not all in 0 .. 2**64 - 1
        return _formatted(ids, present)
    if len(words) != len(ids) or rows * _SPAN_ID_DIGITS >= 2**31:
        return _formatted(ids, present)
    digits = binascii.hexlify(words.astype(">u8").tobytes())
    if present is None or len(ids) == rows:
        offsets = np.arange(0, len(digits) + 1, _SPAN_ID_DIGITS, dtype=np.int32)
        return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(digits))
    valid = np.array(present, dtype=np.bool_)
    if valid.shape != (rows,) or int(valid.sum()) != len(ids):
        raise ValueError("span_id_column: ids and present flags do not match")
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(valid * np.int32(_SPAN_ID_DIGITS), out=offsets[1:])
    return pa.StringArray.from_buffers(
        rows,
        pa.py_buffer(offsets),
        pa.py_buffer(digits),
        pa.py_buffer(np.packbits(valid, bitorder="little")),
        rows - len(ids),
    )


def _formatted(ids: Sequence[int], present: Sequence[bool] | None) -> pa.Array:
    """:func:`span_id_column` one id at a time (an id numpy refuses)."""
    text = iter(hex_ids(ids, 8))
    if present is None:
        return pa.array(list(text), type=pa.string())
    return pa.array([next(text) if p else None for p in present], type=pa.string())
