"""A time partition of the model built in request partitions, when it is large for the
connection's memory limit.

Every per-request table of the model (:mod:`._partition`) depends only on the spans of
one logical request, so a partition's tables are the union of the tables of disjoint sets
of its requests. Built in one pass, the wide joins and windows over every attempt of a
large partition (a day, or a whole unpartitioned data set) hold far more than a small
memory limit allows; built in ``k`` request partitions (``hash(logical_request_id) % k``,
each in memory), each pass stays small, and the price is that every pass scans the
partition's files again.
"""

from __future__ import annotations

import math
import os
import re
from typing import Final

import duckdb

PARTITIONS_ENV: Final = "RETRYSCOPE_MODEL_PARTITIONS"
"""Environment variable fixing the number of request partitions of a model build over a
whole data set (a positive integer); unset, it follows from the data set's size and the
memory limit (:func:`partitions_for`)."""

SPAN_ROWS_PER_GIB: Final = 5_000_000
"""Span rows one request partition may hold per GiB of the memory limit. Measured on 2
cores: the model of 13.9 M span rows (10 M attempts) peaked at 5.8 GiB built in one pass
without spilling, and a single pass over them needed about 1.5 GB spilling."""
_UNITS: Final = {
    "bytes": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
}
_SIZE: Final = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*")


def partitions_for(span_rows: int, memory_limit: int | None) -> int:
    """How many request partitions a build over ``span_rows`` rows needs under a memory
    limit of ``memory_limit`` bytes (one when there is no known limit)."""
    if memory_limit is None or memory_limit <= 0 or span_rows <= 0:
        return 1
    per_partition = max(1, int(SPAN_ROWS_PER_GIB * memory_limit / 2**30))
    return max(1, math.ceil(span_rows / per_partition))


def memory_limit_bytes(setting: str) -> int | None:
    """DuckDB's rendering of its ``memory_limit`` (``'1.3 GiB'``, ``'512.0 MiB'``) in bytes;
    None when it is not a size (e.g. a future rendering of "no limit")."""
    match = _SIZE.fullmatch(setting)
    if match is None or match.group(2) not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def configured_partitions(
    con: duckdb.DuckDBPyConnection, span_rows: int | None, *, concurrent: int = 1
) -> int:
    """The number of request partitions for a build over ``span_rows`` span rows on
    ``con``: :data:`PARTITIONS_ENV` when set, else from the row count (from the files'
    footers; no data is read) and the connection's memory limit, shared by ``concurrent``
    builds; one when the count is unknown (an object-store data set). A bad
    :data:`PARTITIONS_ENV` is a ValueError that names it."""
    fixed = os.environ.get(PARTITIONS_ENV, "").strip()
    if fixed:
        try:
            partitions = int(fixed)
        except ValueError:
            partitions = 0
        if partitions < 1:
            raise ValueError(f"{PARTITIONS_ENV}={fixed!r} is not a positive integer")
        return partitions
    if span_rows is None:
        return 1
    ((setting,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    limit = memory_limit_bytes(str(setting))
    return partitions_for(int(span_rows), None if limit is None else limit // max(1, concurrent))
