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
import pyarrow.parquet as pq

from retryscope.analytics import _object_store as object_store
from retryscope.analytics._queries import sql_string
from retryscope.analytics.distributed._layout import Location, part_name
from retryscope.analytics.model._partition import PER_REQUEST_TABLES, build_partition
from retryscope.analytics.model._progress import quiet_duckdb
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


def wire_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp as int64 nanoseconds since the epoch, nested ones too:
    how spans cross an engine that has no nanosecond timestamps (Spark)."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(wire_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(wire_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(wire_type(t.key_type)), wire_type(t.item_type))
    return t


def wire_schema(columns: list[str]) -> pa.Schema:
    """The span schema's ``columns`` in :func:`wire_type`."""
    return pa.schema([pa.field(c, wire_type(SPAN_SCHEMA.field(c).type)) for c in columns])


def read_span_file(url: str, columns: list[str]) -> pa.Table:
    """The ``columns`` of the span file ``url`` (an object-store URL or an absolute path) in
    :func:`wire_schema`: a column the file stores in another type is cast to the span
    schema's (without loss, or an error), one it lacks is NULL, as a single-node build
    reads it. Folder names (``date=``/``hour=``) are not columns."""
    fs, path = object_store.filesystem(url)
    with fs.open_input_file(path) as fh:
        parquet = pq.ParquetFile(fh)
        present = [c for c in columns if c in parquet.schema_arrow.names]
        table = parquet.read(columns=present)
    target = wire_schema(columns)
    arrays = []
    for field in target:
        if field.name not in present:
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        try:
            column = table.column(field.name).cast(SPAN_SCHEMA.field(field.name).type)
            arrays.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"{url}: column {field.name} does not read as spans: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=target)


def write_part(location: Location, relative: str, table: pa.Table, tag: str) -> int:
    """Write ``table`` to ``relative`` of ``location`` as DuckDB writes the model cache
    (zstd Parquet): a temporary file named by the attempt's ``tag``, moved into place
    whole. Returns its rows."""
    tmp = location.temp_file(relative, tag)
    con = quiet_duckdb(duckdb.connect(":memory:", config={"threads": 1}))
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
