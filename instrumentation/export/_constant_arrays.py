"""Columns whose rows all hold one value, built once and recognised again when sorting.

In an exporter batch most dedicated columns are all null, events and links are usually
empty, and every span of a process carries the same resource. Such a column is built once
per (value, type, length) and the same immutable Arrow array is reused for every batch of
that length; sorting a buffer whose column consists only of those arrays (or slices of
them) keeps the column as it is, since any order of identical rows is the same column.

An array is recognised by the addresses of its buffers. The registry holds every array it
lists, so an address it lists belongs to a live buffer of that array and cannot name
anything else; an array dropped from the (bounded) registry is simply no longer
recognised, and sorting takes its rows as for any other column.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Final

import pyarrow as pa

from retryscope._fork import at_fork

MAX_CACHED_ROWS: Final = 8192
"""Longer constant columns are built each time and not registered (bounded memory)."""

_MAX_ENTRIES: Final = 256

_lock = threading.Lock()
_arrays: dict[tuple[Hashable, pa.DataType, int], pa.Array] = {}
_known: dict[tuple[int, ...], Hashable] = {}  # buffer addresses of a cached array -> value


def _after_fork_in_child() -> None:
    """A fresh lock in a forked child (another thread may have held it at the fork)."""
    global _lock
    _lock = threading.Lock()


at_fork(after_in_child=_after_fork_in_child)


def _fingerprint(array: pa.Array) -> tuple[int, ...]:
    return tuple(0 if buf is None else buf.address for buf in array.buffers())


def constant(
    value: Hashable, type_: pa.DataType, length: int, build: Callable[[], pa.Array]
) -> pa.Array:
    """The column of ``length`` rows all holding ``value``; ``build()`` makes it when it is
    not cached (it must return exactly that column, of type ``type_``)."""
    if not 0 < length <= MAX_CACHED_ROWS:
        return build()
    key = (value, type_, length)
    cached = _arrays.get(key)
    if cached is not None:
        return cached
    array = build()
    if array.type != type_ or len(array) != length:
        raise ValueError(f"constant column of {type_}: built {array.type} x {len(array)}")
    with _lock:
        if key in _arrays:
            return _arrays[key]
        while len(_arrays) >= _MAX_ENTRIES:
            evicted = _arrays.pop(next(iter(_arrays)))
            _known.pop(_fingerprint(evicted), None)
        _arrays[key] = array
        _known[_fingerprint(array)] = value
    return array


def nulls(length: int, type_: pa.DataType) -> pa.Array:
    """An all-null column (cached as :func:`constant`)."""
    return constant(None, type_, length, lambda: pa.nulls(length, type_))


def is_constant(column: pa.ChunkedArray) -> bool:
    """Whether every chunk of ``column`` is (a slice of) a cached constant array of one and
    the same value, so that every row of ``column`` holds that value."""
    values: set[Hashable] = set()
    with _lock:
        for chunk in column.chunks:
            value = _known.get(_fingerprint(chunk), _MISSING)
            if value is _MISSING:
                return False
            values.add(value)
    return len(values) == 1


_MISSING: Final = object()
