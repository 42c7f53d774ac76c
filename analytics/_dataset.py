"""Find the Parquet files of an audit data set and open DuckDB views over them.

Only complete files are read: writers create ``.<name>.inprogress`` files and rename them
when done, and hidden files are never listed. Every file's footer is checked before DuckDB
sees it, so one corrupt or truncated file is named and skipped instead of failing the whole
report. Object-store URLs (``s3://…``) are handed to DuckDB as a glob (``httpfs``).
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from retryscope._environment import MEMORY_LIMIT_ENV as MEMORY_LIMIT_ENV
from retryscope.analytics._bloom_probe import LookupRowGroup, lookup_columns, lookup_row_groups
from retryscope.analytics._macros import install_macros
from retryscope.analytics._queries import sql_string
from retryscope.analytics.model._cache import model_cache as model_cache_of
from retryscope.instrumentation.export._bloom_filters import LOOKUP_COLUMNS
from retryscope.schema import SPAN_SCHEMA

VIEWS_SQL = """
CREATE OR REPLACE VIEW attempts AS SELECT * FROM spans WHERE span_role = 'attempt';
CREATE OR REPLACE VIEW logical_requests AS
    SELECT * FROM spans WHERE span_role = 'logical_request';
"""


@dataclass(frozen=True, slots=True)
class SkippedFile:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class DataSet:
    """The files an analysis reads, and those it had to skip (with why)."""

    root: str
    files: tuple[str, ...]
    skipped: tuple[SkippedFile, ...] = field(default=())
    same_schema: bool = False
    """All files have one schema (checked by :func:`discover`), so DuckDB need not read
    every file's schema to unify them."""
    lookup: tuple[LookupRowGroup, ...] = field(default=())
    """Statistics and Bloom filter locations of the lookup columns in every row group, from
    the footers :func:`discover` read (drill-downs use them to pick the files to read)."""
    rows: int | None = None
    """Span rows in ``files``, from their footers (None for an object-store data set, whose
    footers are not read up front)."""

    @property
    def is_remote(self) -> bool:
        return "://" in self.root


def _is_visible(name: str) -> bool:
    return not name.startswith((".", "_")) and name.endswith(".parquet")


_FOOTER_READERS: Final = 4


def _read_footer(path: str) -> pq.FileMetaData | Exception:
    """A span file's footer, or why it cannot be read as one."""
    try:
        meta = pq.read_metadata(path)
        if "span_id" not in meta.schema.names:
            raise ValueError("not a retryscope span file (no span_id column)")
    except Exception as exc:
        return exc
    return meta


def discover(root: str | os.PathLike[str]) -> DataSet:
    """All readable span files under ``root`` (a directory, a file, or an ``s3://`` prefix)."""
    text = os.fspath(root)
    if "://" in text:
        glob = text if text.endswith(".parquet") else text.rstrip("/") + "/**/*.parquet"
        return DataSet(text, (glob,))
    path = Path(text)
    if path.is_file():
        candidates = [str(path)]
    elif path.is_dir():
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # hidden: not read
            found += (os.path.join(dirpath, name) for name in filenames if _is_visible(name))
        candidates = sorted(found, key=lambda f: f.split(os.sep))  # as paths sort
    else:
        raise FileNotFoundError(f"no audit data at {text!r}: not a file or directory")
    files: list[str] = []
    skipped: list[SkippedFile] = []
    first: pq.ParquetSchema | None = None
    first_columns: dict[str, int] = {}
    same_schema = True
    lookup: list[LookupRowGroup] = []
    rows = 0
    with ThreadPoolExecutor(_FOOTER_READERS) as pool:  # pyarrow parses without the GIL
        footers = list(pool.map(_read_footer, candidates))
    for candidate, meta in zip(candidates, footers, strict=True):
        if isinstance(meta, Exception):  # corrupt, truncated, zero-byte, unreadable, foreign
            skipped.append(SkippedFile(candidate, f"{type(meta).__name__}: {meta}"))
            continue
        files.append(candidate)
        # the Parquet schemas DuckDB reads (column names, types, nesting) are identical
        if first is None:
            first, first_columns = meta.schema, lookup_columns(meta.schema, LOOKUP_COLUMNS)
            columns = first_columns
        elif meta.schema.equals(first):
            columns = first_columns
        else:
            same_schema = False
            columns = lookup_columns(meta.schema, LOOKUP_COLUMNS)
        lookup += lookup_row_groups(candidate, meta, columns)
        rows += meta.num_rows
    return DataSet(
        text,
        tuple(files),
        tuple(skipped),
        same_schema=bool(files) and same_schema,
        lookup=tuple(lookup),
        rows=rows,
    )


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def new_connection(
    *,
    memory_limit: str | None = None,
    temp_directory: str | os.PathLike[str] | None = None,
    threads: int | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection set up for the analytics: one thread per usable core,
    no insertion order kept (CREATE TABLE AS runs in parallel; every query that needs an
    order says ORDER BY), and a spill directory so work beyond ``memory_limit`` (DuckDB's
    default when None: 80 % of RAM) goes to disk instead of failing."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": threads or _cores(),
        "preserve_insertion_order": False,
        "temp_directory": os.fspath(
            # per process: DuckDB creates it on the first spill and removes it on close
            temp_directory or Path(tempfile.gettempdir()) / f"retryscope-duckdb-{os.getpid()}"
        ),
    }
    if memory_limit:
        config["memory_limit"] = memory_limit
    try:
        return duckdb.connect(":memory:", config=config)
    except duckdb.Error as exc:
        if memory_limit and "memory" in str(exc).lower():
            raise ValueError(
                f"memory limit {memory_limit!r} is not a size DuckDB accepts "
                f"(e.g. 1.5GB, 800MB): {exc}"
            ) from exc
        raise


def connect(
    data: DataSet | str | os.PathLike[str],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    model_cache: str | os.PathLike[str] | None = None,
) -> tuple[duckdb.DuckDBPyConnection, DataSet]:
    """A DuckDB connection (``con``, or :func:`new_connection`) with views ``spans``,
    ``attempts``, ``logical_requests`` and the analytics macros. Nothing is read yet: the
    analytics tables of ``sql/base.sql`` and ``sql/scope.sql`` (``physical_attempts``,
    ``requests``, ``attempt_facts``, ...) are built when a query first needs them.

    With ``model_cache`` (a directory), the tables of ``base.sql`` are read from the data
    set's cached model when it is up to date, and built into it when it is not
    (``model_cache.py``).

    An empty data set still gets the views (over an empty table of the current schema), so
    every query works and returns zero rows.
    """
    dataset = data if isinstance(data, DataSet) else discover(data)
    if con is None:
        con = new_connection()
    # a table, not a registered Arrow object: cursors (drill-downs) see it too
    con.register("_retryscope_empty_arrow", SPAN_SCHEMA.empty_table())
    con.execute(
        "CREATE OR REPLACE TABLE _retryscope_empty AS SELECT * FROM _retryscope_empty_arrow"
    )
    con.unregister("_retryscope_empty_arrow")
    _create_spans_view(con, dataset.files, union=not dataset.same_schema)
    _create_lookup_index(con, dataset.lookup)
    con.execute("CREATE OR REPLACE TEMP TABLE _retryscope_skipped (path VARCHAR, reason VARCHAR)")
    con.execute(VIEWS_SQL)
    install_macros(con)
    from retryscope.analytics.replay import (
        _policy_drift as policy_drift,  # registers the evaluator and its macro
    )

    policy_drift.install(con, dataset)
    # tables built over an earlier data set on this connection are stale: rebuild on use
    con.execute("SET VARIABLE rs_model_built = false")
    con.execute("SET VARIABLE rs_scope_key = NULL")
    con.execute("SET VARIABLE rs_span_rows = ?", [dataset.rows])
    cache = model_cache_of(dataset.root, dataset.files, model_cache) if model_cache else None
    con.execute(
        "SET VARIABLE rs_model_cache = ?",
        [None if cache is None else [str(cache.path), cache.fingerprint]],
    )
    return con, dataset


def _read_parquet(union: bool, *, filename: bool = False) -> str:
    """The ``read_parquet`` call over a macro's ``files`` argument, as ``spans`` reads."""
    extra = ", filename = true" if filename else ""
    return (
        f"read_parquet(files, union_by_name = {str(union).lower()}, "
        f"hive_partitioning = false{extra})"
    )


def _create_spans_view(
    con: duckdb.DuckDBPyConnection, files: tuple[str, ...] | list[str], *, union: bool
) -> None:
    """The view ``spans`` over ``files`` and, for drill-downs (``requests.py``), the file list
    ``_retryscope_files`` and two table macros over any subset of it: ``spans_in(files)``
    (exactly what ``spans`` reads) and ``span_ids_in(files)`` (only the lookup columns and
    each row's file). All live in the main schema, so cursors see them too."""
    con.execute(
        "CREATE OR REPLACE TABLE _retryscope_files AS SELECT unnest($files::VARCHAR[]) AS path",
        {"files": list(files)},
    )
    con.execute(
        "CREATE OR REPLACE MACRO spans_in(files) AS TABLE "
        f"SELECT * FROM {_read_parquet(union)} "
        # every column of the current schema exists, even if older files lack it
        "UNION ALL BY NAME SELECT * FROM _retryscope_empty"
    )
    con.execute(
        "CREATE OR REPLACE MACRO span_ids_in(files) AS TABLE "
        "SELECT filename, logical_request_id, trace_id, idempotency_digest FROM ("
        f"SELECT * FROM {_read_parquet(union, filename=True)} "
        "UNION ALL BY NAME SELECT *, NULL::VARCHAR AS filename FROM _retryscope_empty)"
    )
    if not files:
        con.execute("CREATE OR REPLACE VIEW spans AS SELECT * FROM _retryscope_empty")
        return
    file_list = "[" + ", ".join(sql_string(f) for f in files) + "]"
    con.execute(f"CREATE OR REPLACE VIEW spans AS SELECT * FROM spans_in({file_list})")


_LOOKUP_INDEX_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("row_group", pa.int64()),
        ("column_name", pa.string()),
        ("min_value", pa.string()),
        ("max_value", pa.string()),
        ("bloom_offset", pa.int64()),
        ("bloom_length", pa.int64()),
        ("all_null", pa.bool_()),
    ]
)


def _create_lookup_index(
    con: duckdb.DuckDBPyConnection, lookup: tuple[LookupRowGroup, ...]
) -> None:
    """``_retryscope_row_groups``: the lookup columns' statistics and Bloom filter locations
    per row group (``DataSet.lookup``), in the main schema so drill-down cursors see it."""
    index = pa.Table.from_arrays(
        [
            pa.array([getattr(entry, f.name) for entry in lookup], f.type)
            for f in _LOOKUP_INDEX_SCHEMA
        ],
        schema=_LOOKUP_INDEX_SCHEMA,
    )
    con.register("_retryscope_row_groups_arrow", index)
    con.execute(
        "CREATE OR REPLACE TABLE _retryscope_row_groups AS "
        "SELECT * FROM _retryscope_row_groups_arrow"
    )
    con.unregister("_retryscope_row_groups_arrow")


def drop_undecodable_files(con: duckdb.DuckDBPyConnection) -> bool:
    """After a query failed: find the files whose footer is intact but whose pages DuckDB
    cannot decode (a bit flip, a torn write by a foreign tool), record them as skipped and
    point ``spans`` at the rest. Returns False when no file is to blame. Only this failure
    path reads every file; opening a data set stays free of reads."""
    files = [str(f) for (f,) in con.execute("SELECT path FROM _retryscope_files").fetchall()]
    bad: dict[str, str] = {}
    probe = duckdb.connect(":memory:")
    try:
        for f in files:
            try:
                probe.sql("SELECT * FROM read_parquet($f)", params={"f": f}).to_arrow_table()
            except duckdb.Error as exc:
                bad[f] = f"{type(exc).__name__}: {exc}"
    finally:
        probe.close()
    if not bad:
        return False
    skip_files(con, bad)
    return True


def skip_files(con: duckdb.DuckDBPyConnection, bad: dict[str, str]) -> None:
    """Record ``bad`` (path: why) as skipped and point ``spans`` at the other files."""
    files = [str(f) for (f,) in con.execute("SELECT path FROM _retryscope_files").fetchall()]
    con.executemany(
        "INSERT INTO _retryscope_skipped VALUES (?, ?)", [[f, r] for f, r in bad.items()]
    )
    _create_spans_view(con, [f for f in files if f not in bad], union=True)


def skipped_files(con: duckdb.DuckDBPyConnection, dataset: DataSet) -> tuple[SkippedFile, ...]:
    """Every file skipped so far: unreadable footers found when the data set was listed,
    and files whose pages failed to decode when a query first read them."""
    late = con.execute("SELECT path, reason FROM _retryscope_skipped ORDER BY path").fetchall()
    return (*dataset.skipped, *(SkippedFile(str(p), str(r)) for p, r in late))
