"""The audit model built one request partition at a time, when the data set is large for
the connection's memory limit.

Every per-request table of the model (``base_attempts.sql``, ``base_http_attempts.sql``,
``base.sql``) depends only on the spans of one logical request, so the model of the whole
data set is the union of the models of disjoint sets of requests. Built in one pass, its
wide joins and windows over every attempt hold far more than a small memory limit allows:
at 100 M attempts DuckDB ran out of memory at 1 GB after spilling 39 GB, and at 4 GB it
filled a 64 GB disk. Built in ``k`` partitions (requests by ``hash(logical_request_id) % k``,
each in memory and appended to the model's file), each pass stays small; the price is that
every pass scans the data files again.

The telemetry checks and the unfiltered scope's tables are built afterwards, over the
finished tables (they read the whole model, and ``span_anomalies`` every span).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Final

import duckdb

PARTITIONS_ENV: Final = "RETRYSCOPE_MODEL_PARTITIONS"
"""Environment variable fixing the number of request partitions of a model build over a
whole data set (a positive integer); unset, it follows from the data set's size and the
memory limit (:func:`partitions_for`)."""

SPAN_ROWS_PER_GIB: Final = 5_000_000
"""Span rows one partition may hold per GiB of the memory limit. Measured on 2 cores: the
model of 13.9 M span rows (10 M attempts) peaks at 5.8 GiB built without spilling, and a
single pass over them needs about 1.5 GB spilling; 100 M attempts at a 2 GB limit (16
partitions of 8.7 M span rows) built in 41 min at 2.7 GiB peak RSS."""

PER_REQUEST_TABLES: Final = (
    "request_base",
    "reconciliations",
    "all_attempt_facts",
    "all_request_layers",
    "all_request_nesting",
    "all_receiver_traffic",
)
"""The tables the three per-request scripts leave behind, in the order they are built."""

_INTERMEDIATE_TABLES: Final = ("attempt_groups", "attempt_rows")
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


def configured_partitions(con: duckdb.DuckDBPyConnection) -> int:
    """The number of partitions for a build of the whole data set ``spans`` on ``con``:
    :data:`PARTITIONS_ENV` when set, else from the span count of the data set's footers
    (recorded by :func:`~retryscope.analytics._dataset.connect`; no data is read) and the
    connection's memory limit; one when the count is unknown (an object-store data set).
    A bad :data:`PARTITIONS_ENV` is a ValueError that names it."""
    fixed = os.environ.get(PARTITIONS_ENV, "").strip()
    if fixed:
        try:
            partitions = int(fixed)
        except ValueError:
            partitions = 0
        if partitions < 1:
            raise ValueError(f"{PARTITIONS_ENV}={fixed!r} is not a positive integer")
        return partitions
    ((span_rows, setting),) = con.execute(
        "SELECT getvariable('rs_span_rows'), current_setting('memory_limit')"
    ).fetchall()
    if span_rows is None:
        return 1
    return partitions_for(int(span_rows), memory_limit_bytes(str(setting)))


def build(
    con: duckdb.DuckDBPyConnection,
    partitions: int,
    per_request: Callable[[duckdb.DuckDBPyConnection], None],
) -> None:
    """Build :data:`PER_REQUEST_TABLES` as persistent tables of ``con``'s default database
    (the model's file) in ``partitions`` passes. Each pass shadows ``spans`` with a temp
    view of one partition's requests, runs ``per_request`` (the scripts, creating temp
    tables) and appends its tables to the file. Whatever stops a pass, the shadow view and
    the pass's temp tables are dropped again."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    target, source = _target_and_spans(con)
    try:
        for part in range(partitions):
            con.execute(
                "CREATE OR REPLACE TEMP VIEW spans AS SELECT * FROM "
                f"{source} WHERE hash(logical_request_id) % {int(partitions)} = {int(part)}"
            )
            per_request(con)
            for table in PER_REQUEST_TABLES:
                if part == 0:
                    con.execute(
                        f'CREATE TABLE "{target}".main.{table} AS SELECT * FROM temp.main.{table}'
                    )
                else:
                    con.execute(
                        f'INSERT INTO "{target}".main.{table} SELECT * FROM temp.main.{table}'
                    )
                con.execute(f"DROP TABLE temp.main.{table}")
    finally:
        _drop_temporaries(con)


def _target_and_spans(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """The default database (where the tables go) and the qualified name of the view
    ``spans`` that unqualified names reach first (the data set's, not yet shadowed)."""
    ((target, search_path),) = con.execute(
        "SELECT current_database(), current_setting('search_path')"
    ).fetchall()
    homes = {
        f"{db}.{schema}": f'"{db}"."{schema}".spans'
        for db, schema in con.execute(
            "SELECT database_name, schema_name FROM duckdb_views()"
            " WHERE view_name = 'spans' AND NOT temporary"
        ).fetchall()
    }
    order = [p.strip() for p in str(search_path).split(",") if p.strip()]
    order += [f"{target}.main", "memory.main"]
    for entry in order:
        if entry in homes:
            return str(target), homes[entry]
    raise ValueError("no view `spans` to build the model from")


def _drop_temporaries(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the shadow view and any temp table a pass left (a stopped one leaves some)."""
    con.execute("DROP VIEW IF EXISTS temp.main.spans")
    con.execute("DROP VIEW IF EXISTS temp.main.physical_attempts")
    for table in (*PER_REQUEST_TABLES, *_INTERMEDIATE_TABLES):
        con.execute(f"DROP TABLE IF EXISTS temp.main.{table}")
