"""Parquet Bloom filters on the columns a drill-down looks a request up by.

Files are written per hour, so every file spans the whole random range of request ids and
min/max statistics rule out at most the half of a file that sorting puts out of range. A
Bloom filter per row group on each lookup column lets a reader (DuckDB does, for ``=``
predicates) skip every row group that cannot hold the id, so looking up one request reads
one or two row groups of the whole data set instead of every file's id column.

Each filter is sized from the distinct values of its column in the file being written,
scaled to one row group (rows are spread evenly: the file is sorted by request id, and
trace ids and idempotency digests follow their requests). The writer rounds a filter up
to a power of two bytes, so the false-positive rate it reaches lies between about a fifth
of :data:`FALSE_POSITIVE_RATE` and that rate: 1.2–2.4 bytes per distinct value. A false
positive costs a lookup one row group's id column read for nothing (≈ 10 ms for 100 000
rows), and a lookup by logical request id checks one row group per file, by trace id two:
at 1 % a 78-file data set costs under one such read per lookup, at 5 % two to four.
"""

from __future__ import annotations

import math
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from retryscope.schema import LOOKUP_COLUMNS

FALSE_POSITIVE_RATE: Final = 0.01


def bloom_filter_options(table: pa.Table, row_group_rows: int) -> dict[str, dict[str, float]]:
    """``bloom_filter_options`` for ``pyarrow.parquet.write_table`` of ``table`` in row
    groups of ``row_group_rows`` rows: one filter per lookup column that ``table`` has and
    that holds at least one value."""
    rows = table.num_rows
    if rows == 0:
        return {}
    share = min(row_group_rows, rows) / rows
    options: dict[str, dict[str, float]] = {}
    for name in LOOKUP_COLUMNS:
        if name not in table.column_names:
            continue
        distinct = pc.count_distinct(table.column(name)).as_py()
        if distinct:
            ndv = max(1, math.ceil(distinct * share))
            options[name] = {"ndv": ndv, "fpp": FALSE_POSITIVE_RATE}
    return options
