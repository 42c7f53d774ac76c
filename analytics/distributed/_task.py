"""One task of a distributed model build, the same whatever engine runs it: the spans of
one partition of the data set by a hash of ``logical_request_id`` (every span of each
request it holds), as Arrow, in; the partition's per-request tables, written as fixed
part files of a build folder (:mod:`._layout`), out.

An engine's adapter does the rest: it shuffles the spans by the request id, calls
:func:`run_task` once per partition (an empty partition too, so every table has one part
per partition), and hands the :class:`TaskResult` of each back to the driver, which
verifies the parts against them before committing (:mod:`._commit`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from retryscope.analytics._queries import sql_string
from retryscope.analytics.distributed._layout import Location, part_name
from retryscope.analytics.model._partition import PER_REQUEST_TABLES, build_partition
from retryscope.analytics.model._store import Modes
from retryscope.schema import SPAN_SCHEMA


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What one task wrote: its partition, the span rows it read, the rows of each table
    it wrote, and the seconds it took."""

    partition: int
    span_rows: int
    table_rows: dict[str, int]
    seconds: float


def span_table(batches: Iterable[pa.RecordBatch], columns: list[str]) -> pa.Table:
    """The batches an engine handed a task as one table of the span schema's types (an
    engine without nanosecond timestamps hands them over as int64 nanoseconds since the
    epoch: cast back without loss, nested in events too); no batches: no rows."""
    target = pa.schema([pa.field(c, SPAN_SCHEMA.field(c).type) for c in columns])
    received = list(batches)
    if not received:
        return target.empty_table()
    table = pa.Table.from_batches(received).select(columns)
    return table.cast(target)


def write_part(location: Location, relative: str, table: pa.Table, tag: str) -> int:
    """Write ``table`` to ``relative`` of ``location`` as DuckDB writes the model cache
    (zstd Parquet): a temporary file named by the attempt's ``tag``, moved into place
    whole. Returns its rows."""
    tmp = location.temp_file(relative, tag)
    con = duckdb.connect(":memory:", config={"threads": 1})
    try:
        con.register("rs_part", table)
        con.execute(
            f"COPY (SELECT * FROM rs_part) TO {sql_string(tmp)} (FORMAT parquet, COMPRESSION zstd)"
        )
    finally:
        con.close()
    location.put_file(tmp, relative)
    return int(table.num_rows)


def run_task(
    spans: pa.Table,
    partition: int,
    *,
    model: str,
    build: str,
    tag: str,
    modes: Modes | None = None,
) -> TaskResult:
    """Build the per-request tables of ``spans`` (one partition, in one DuckDB thread:
    the engine runs one task per core) and write each to
    ``<model>/<build>/<table>/part-<partition>.parquet``. ``tag`` names this attempt's
    temporary files (unique per attempt, so two attempts never write the same one)."""
    start = time.perf_counter()
    location = Location(model, modes)
    tables = build_partition(spans, threads=1)
    rows = {}
    for table in PER_REQUEST_TABLES:
        location.make_dir(f"{build}/{table}")
        rows[table] = write_part(
            location, f"{build}/{table}/{part_name(partition)}", tables[table], tag
        )
    return TaskResult(partition, int(spans.num_rows), rows, time.perf_counter() - start)
