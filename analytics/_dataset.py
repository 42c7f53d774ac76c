"""Find the Parquet files of an audit data set and open DuckDB views over them.

Only complete files are read: writers create ``.<name>.inprogress`` files and rename them
when done, and hidden files are never listed. Every file's footer is checked before DuckDB
sees it, so one corrupt or truncated file, or one whose column types cannot be read as the
span schema's (``_file_schema.py``), is named and skipped instead of failing the whole
report. An object-store prefix (``s3://bucket/prefix``) is listed and its footers read the
same way, through pyarrow's file systems (``_object_store.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from retryscope._environment import MEMORY_LIMIT_ENV as MEMORY_LIMIT_ENV
from retryscope._fs import make_dirs
from retryscope.analytics import _object_store as object_store
from retryscope.analytics._bloom_probe import LookupRowGroup, lookup_columns, lookup_row_groups
from retryscope.analytics._file_schema import FileTypes, file_types
from retryscope.analytics._macros import install_macros
from retryscope.analytics._queries import create_table, sql_string
from retryscope.analytics.model._progress import quiet_duckdb
from retryscope.analytics.model._store import Modes
from retryscope.schema import LOOKUP_COLUMNS, SPAN_SCHEMA

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
    """Span rows in ``files``, from their footers (None when not known: a data set not made
    by :func:`discover`)."""
    file_rows: tuple[int, ...] = field(default=())
    """Span rows of each file of ``files`` (from their footers, as ``rows``)."""
    casts: frozenset[str] = frozenset()
    """Columns some file stores in another type than the span schema's, read cast to it."""
    sizes: tuple[int, ...] = field(default=())
    """Bytes of each file of ``files`` (an object-store data set's, from its listing)."""

    @property
    def is_remote(self) -> bool:
        return "://" in self.root


def subset(dataset: DataSet, files: Collection[str]) -> DataSet:
    """``dataset`` with only those of its files (and skipped files) named in ``files``:
    the closed time partitions a watcher builds while others are still being written."""
    keep = set(files)
    kept = [i for i, f in enumerate(dataset.files) if f in keep]

    def pick(values: Sequence[int]) -> tuple[int, ...]:
        return tuple(values[i] for i in kept) if values else ()

    return replace(
        dataset,
        files=tuple(dataset.files[i] for i in kept),
        skipped=tuple(s for s in dataset.skipped if s.path in keep),
        lookup=tuple(g for g in dataset.lookup if g.path in keep),
        rows=sum(pick(dataset.file_rows)) if dataset.file_rows else dataset.rows,
        file_rows=pick(dataset.file_rows),
        sizes=pick(dataset.sizes),
    )


def is_visible(name: str) -> bool:
    """Whether a file named ``name`` is one an analysis reads (written and closed: the
    writers' files in progress are hidden)."""
    return not name.startswith((".", "_")) and name.endswith(".parquet")


_FOOTER_READERS: Final = 4
_REMOTE_FOOTER_READERS: Final = 16
"""An object store answers each footer read after a round trip: more of them at once."""


def _read_footer(path: str, fs: pafs.FileSystem | None = None) -> pq.FileMetaData | Exception:
    """A span file's footer (``path`` on ``fs``, a local path when None), or why it cannot
    be read as one."""
    try:
        meta = pq.read_metadata(path, filesystem=fs)
        if "span_id" not in meta.schema.names:
            raise ValueError("not a retryscope span file (no span_id column)")
    except Exception as exc:
        return exc
    return meta


def discover(root: str | os.PathLike[str]) -> DataSet:
    """All readable span files under ``root`` (a directory, a file, or an ``s3://`` prefix)."""
    text = os.fspath(root)
    if object_store.is_url(text):
        return _discover_remote(text)
    path = Path(text)
    if path.is_file():
        candidates = [str(path)]
    elif path.is_dir():
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # hidden: not read
            found += (os.path.join(dirpath, name) for name in filenames if is_visible(name))
        candidates = sorted(found, key=lambda f: f.split(os.sep))  # as paths sort
    else:
        raise FileNotFoundError(f"no audit data at {text!r}: not a file or directory")
    with ThreadPoolExecutor(_FOOTER_READERS) as pool:  # pyarrow parses without the GIL
        footers = list(pool.map(_read_footer, candidates))
    return _checked(text, candidates, footers, lookup=True)


def _discover_remote(url: str) -> DataSet:
    """The readable span files of an object-store URL: the object itself, or every
    visible ``*.parquet`` object under the prefix (none below a hidden folder)."""
    fs, path = object_store.filesystem(url)
    try:
        listed = _objects(fs, path.rstrip("/"))
    except OSError as exc:
        raise FileNotFoundError(f"no audit data at {url!r}: {exc}") from exc
    if listed is None:
        raise FileNotFoundError(f"no audit data at {url!r}: no object or prefix there")
    paths = [entry.path for entry in listed]
    with ThreadPoolExecutor(_REMOTE_FOOTER_READERS) as pool:
        footers = list(pool.map(lambda p: _read_footer(p, fs), paths))
    candidates = [object_store.to_url(url, p) for p in paths]
    sizes = [int(entry.size or 0) for entry in listed]
    return _checked(url, candidates, footers, lookup=False, sizes=sizes)


def _objects(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo] | None:
    """The object ``path``, or the visible span objects under it in path order; None
    when there is neither."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [info]
    if info.type != pafs.FileType.Directory:
        return None
    listed = [
        entry
        for entry in fs.get_file_info(pafs.FileSelector(path, recursive=True))
        if entry.type == pafs.FileType.File and _visible_below(entry.path.removeprefix(path + "/"))
    ]
    return sorted(listed, key=lambda entry: entry.path.split("/"))


def _visible_below(relative: str) -> bool:
    *folders, name = relative.split("/")
    return is_visible(name) and not any(f.startswith(".") for f in folders)


def _checked(
    root: str,
    candidates: Sequence[str],
    footers: Sequence[pq.FileMetaData | Exception],
    *,
    lookup: bool,
    sizes: Sequence[int] = (),
) -> DataSet:
    """The data set of the ``candidates`` whose ``footers`` read as span files (the
    others skipped, with why); ``lookup``: note the lookup columns' row groups too;
    ``sizes``: the candidates' bytes, if known."""
    files: list[str] = []
    kept_sizes: list[int] = []
    file_rows: list[int] = []
    skipped: list[SkippedFile] = []
    first: pq.ParquetSchema | None = None
    first_columns: dict[str, int] = {}
    first_types = FileTypes()
    same_schema = True
    casts: set[str] = set()
    lookups: list[LookupRowGroup] = []
    for index, (candidate, meta) in enumerate(zip(candidates, footers, strict=True)):
        if isinstance(meta, Exception):  # corrupt, truncated, zero-byte, unreadable, foreign
            skipped.append(SkippedFile(candidate, f"{type(meta).__name__}: {meta}"))
            continue
        # the Parquet schemas DuckDB reads (column names, types, nesting) are identical
        if first is not None and meta.schema.equals(first) and not first_types.casts:
            columns, types = first_columns, first_types  # the schema's own types
        else:
            columns = lookup_columns(meta.schema, LOOKUP_COLUMNS)
            types = file_types(meta)  # statistics may decide: not shared with other files
            if first is None and types.problem is None:
                first, first_columns, first_types = meta.schema, columns, types
            elif first is not None:
                same_schema = False
        if types.problem is not None:
            skipped.append(SkippedFile(candidate, f"ColumnTypeError: {types.problem}"))
            continue
        casts |= types.casts
        files.append(candidate)
        file_rows.append(meta.num_rows)
        kept_sizes += [sizes[index]] if sizes else []
        if lookup:
            lookups += lookup_row_groups(candidate, meta, columns)
    return DataSet(
        root,
        tuple(files),
        tuple(skipped),
        same_schema=bool(files) and same_schema and not casts,
        lookup=tuple(lookups),
        rows=sum(file_rows),
        file_rows=tuple(file_rows),
        casts=frozenset(casts),
        sizes=tuple(kept_sizes),
    )


def usable_cores() -> int:
    """The cores this process may run on."""
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
        "threads": threads or usable_cores(),
        "preserve_insertion_order": False,
        "temp_directory": os.fspath(
            # per process: DuckDB creates it on the first spill and removes it on close
            temp_directory or Path(tempfile.gettempdir()) / f"retryscope-duckdb-{os.getpid()}"
        ),
    }
    if memory_limit:
        config["memory_limit"] = memory_limit
    try:
        con = quiet_duckdb(duckdb.connect(":memory:", config=config))
    except duckdb.Error as exc:
        if memory_limit and "memory" in str(exc).lower():
            raise ValueError(
                f"memory limit {memory_limit!r} is not a size DuckDB accepts "
                f"(e.g. 1.5GB, 800MB): {exc}"
            ) from exc
        raise
    # every query over a cached model's views binds a read_parquet of each partition's
    # files: footers kept (checked against the file's modification time) are not read
    # and parsed again by every query (a setting of the parquet extension, loaded here)
    con.execute("SET parquet_metadata_cache = true")
    return con


def open_views(con: duckdb.DuckDBPyConnection, dataset: DataSet) -> None:
    """Create on ``con`` the views ``spans``, ``attempts`` and ``logical_requests`` over the
    files of ``dataset`` and the analytics macros. Nothing is read yet.

    An empty data set still gets the views (over an empty table of the current schema), so
    every query works and returns zero rows."""
    # a table, not a registered Arrow object: cursors (drill-downs) see it too
    create_table(con, "_retryscope_empty", SPAN_SCHEMA)
    object_store.register(con, dataset.files)
    _create_span_macros(con, dataset.casts, union=not dataset.same_schema)
    _point_spans(con, dataset.files, dataset.file_rows or None)
    _create_lookup_index(con, dataset.lookup)
    con.execute("CREATE OR REPLACE TEMP TABLE _retryscope_skipped (path VARCHAR, reason VARCHAR)")
    con.execute(VIEWS_SQL)
    install_macros(con)
    if not dataset.is_remote:
        _private_temp_directory(con, Modes.of(dataset.root))


def _private_temp_directory(con: duckdb.DuckDBPyConnection, modes: Modes) -> None:
    """Create ``con``'s temporary directory (where DuckDB spills, derived data) with the
    data set's directory mode, unless it exists; removed at exit when left empty."""
    ((setting,),) = con.execute("SELECT current_setting('temp_directory')").fetchall()
    if not setting:
        return
    directory = Path(str(setting))
    if directory.is_dir():
        return
    try:
        make_dirs(directory, modes.directory)
    except OSError:
        return  # DuckDB names the problem if it ever needs to spill
    atexit.register(_remove_if_empty, directory)


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()


def _read_parquet(union: bool, *, filename: bool = False) -> str:
    """The ``read_parquet`` call over a macro's ``files`` argument, as ``spans`` reads."""
    extra = ", filename = true" if filename else ""
    return (
        f"read_parquet(files, union_by_name = {str(union).lower()}, "
        f"hive_partitioning = false{extra})"
    )


def _create_span_macros(
    con: duckdb.DuckDBPyConnection, casts: frozenset[str], *, union: bool
) -> None:
    """Two table macros over any subset of the data set's files: ``spans_in(files)``
    (exactly what ``spans`` reads: the model builds each time partition from it,
    drill-downs one request) and ``span_ids_in(files)`` (only the lookup columns and each
    row's file). The columns in ``casts`` (some file stores them in another type) are read
    cast to the span schema's. Both live in the main schema, so cursors see them too."""
    types = {
        str(name): str(kind)
        for name, kind, *_ in con.execute("DESCRIBE _retryscope_empty").fetchall()
        if name in casts
    }
    replace = (
        " REPLACE (" + ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in types) + ")"
        if types
        else ""
    )
    con.execute(
        f"CREATE OR REPLACE MACRO spans_in(files) AS TABLE SELECT *{replace} FROM ("
        f"SELECT * FROM {_read_parquet(union)} "
        # every column of the current schema exists, even if older files lack it
        "UNION ALL BY NAME SELECT * FROM _retryscope_empty)"
    )
    con.execute(
        "CREATE OR REPLACE MACRO span_ids_in(files) AS TABLE "
        "SELECT filename, logical_request_id, trace_id, idempotency_digest FROM ("
        f"SELECT * FROM {_read_parquet(union, filename=True)} "
        "UNION ALL BY NAME SELECT *, NULL::VARCHAR AS filename FROM _retryscope_empty)"
    )


def _point_spans(
    con: duckdb.DuckDBPyConnection,
    files: tuple[str, ...] | list[str],
    rows: tuple[int, ...] | list[int] | None = None,
) -> None:
    """The view ``spans`` over ``files`` (through ``spans_in``) and the file list
    ``_retryscope_files`` (path, span rows), in the main schema."""
    con.execute(
        "CREATE OR REPLACE TABLE _retryscope_files AS "
        "SELECT unnest($files::VARCHAR[]) AS path, unnest($rows::BIGINT[]) AS rows",
        {"files": list(files), "rows": list(rows) if rows is not None else [None] * len(files)},
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
    create_table(
        con,
        "_retryscope_row_groups",
        _LOOKUP_INDEX_SCHEMA,
        [[getattr(entry, f.name) for entry in lookup] for f in _LOOKUP_INDEX_SCHEMA],
    )


def drop_undecodable_files(
    con: duckdb.DuckDBPyConnection, among: Sequence[str] | None = None
) -> bool:
    """After a query failed: find the files (of those ``among``, else all) whose footer is
    intact but whose pages DuckDB cannot decode (a bit flip, a torn write by a foreign
    tool), record them as skipped and point ``spans`` at the rest. Returns False when no
    file is to blame. Only this failure path reads whole files; opening a data set stays
    free of reads."""
    files = [str(f) for (f,) in con.execute("SELECT path FROM _retryscope_files").fetchall()]
    if among is not None:
        wanted = set(among)
        files = [f for f in files if f in wanted]
    bad: dict[str, str] = {}
    probe = quiet_duckdb(duckdb.connect(":memory:"))
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
    kept = [
        (str(f), n)
        for f, n in con.execute("SELECT path, rows FROM _retryscope_files").fetchall()
        if f not in bad
    ]
    con.executemany(
        "INSERT INTO _retryscope_skipped VALUES (?, ?)", [[f, r] for f, r in bad.items()]
    )
    _point_spans(con, [f for f, _ in kept], [n for _, n in kept])


def skipped(con: duckdb.DuckDBPyConnection, dataset: DataSet) -> tuple[SkippedFile, ...]:
    """Every file skipped so far: unreadable footers found when the data set was listed,
    and files whose pages failed to decode when a query first read them."""
    late = con.execute("SELECT path, reason FROM _retryscope_skipped ORDER BY path").fetchall()
    return (*dataset.skipped, *(SkippedFile(str(p), str(r)) for p, r in late))
