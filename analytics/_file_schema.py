"""Whether a span file's column types can be read as :data:`retryscope.schema.SPAN_SCHEMA`.

Files from other writers (a foreign exporter, pandas, an older tool) may store a column in
another type than the schema's. A type that holds only values of the schema's type (a
narrower integer, a float32, a timestamp in micro- or milliseconds, dictionary-encoded
strings, any type where the schema has a string) is cast when the data set is read; a
type that may hold values the schema's cannot (text where the schema has a number or a
time, an integer where it has a boolean, an int64 whose footer statistics reach beyond
int32) makes the file unreadable as a span file: it is named and skipped, and the
analysis answers from the other files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from retryscope.schema import SPAN_SCHEMA

_SCHEMA_TYPES: Final = {f.name: f.type for f in SPAN_SCHEMA}
_INT_RANGE: Final = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}
_EXACT_FLOAT_INT: Final = 2**53


@dataclass(frozen=True, slots=True)
class FileTypes:
    """How a file's columns read as the schema: the columns to cast (their types
    differ, without loss), or why the file cannot be read (``problem``)."""

    casts: frozenset[str] = frozenset()
    problem: str | None = None


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    return t


def _within(meta: pq.FileMetaData, column: str, low: int, high: int) -> bool:
    """Whether every row group's statistics of ``column`` lie within [low, high] (False
    when a row group has none)."""
    leaves = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if column not in leaves:
        return False
    index = leaves.index(column)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(index).statistics
        if stats is not None and stats.null_count == group.num_rows:
            continue  # all null
        if stats is None or not stats.has_min_max or not low <= stats.min <= stats.max <= high:
            return False
    return True


def _int_fits(meta: pq.FileMetaData, column: str, target: pa.DataType) -> bool:
    low, high = _INT_RANGE.get(target, (1, 0))
    return low <= high and _within(meta, column, low, high)


def _lossless(have: pa.DataType, want: pa.DataType, meta: pq.FileMetaData, column: str) -> bool:
    if pa.types.is_null(have) or have.equals(want):
        return True
    if pa.types.is_string(want):
        return not pa.types.is_nested(have)  # numbers, booleans and times print exactly
    if pa.types.is_integer(want) and pa.types.is_integer(have):
        signed = pa.types.is_signed_integer(have)
        if signed == pa.types.is_signed_integer(want) and have.bit_width <= want.bit_width:
            return True
        if not signed and have.bit_width < want.bit_width:
            return True
        return _int_fits(meta, column, want)
    if pa.types.is_floating(want) and pa.types.is_floating(have):
        return bool(have.bit_width <= want.bit_width)
    if pa.types.is_floating(want) and pa.types.is_integer(have):
        exact = _EXACT_FLOAT_INT
        return bool(have.bit_width <= 32) or _within(meta, column, -exact, exact)
    # s/ms/us to ns, zoned or not: the same instant
    return bool(pa.types.is_timestamp(want) and pa.types.is_timestamp(have))


def file_types(meta: pq.FileMetaData) -> FileTypes:
    """How the file whose footer is ``meta`` reads as the span schema."""
    try:
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError) as exc:
        return FileTypes(problem=f"its schema cannot be read ({exc})")
    casts: set[str] = set()
    for field in schema:
        want = _SCHEMA_TYPES.get(field.name)
        if want is None:
            continue  # not a schema column: read as it is, never used
        have = _plain(field.type)
        if have.equals(want):
            continue
        if not _lossless(have, want, meta, field.name):
            return FileTypes(
                problem=f"column {field.name!r} is {field.type}, where the span schema has "
                f"{want}: it cannot be read as {want} without loss"
            )
        casts.add(field.name)
    return FileTypes(frozenset(casts))
