"""Find the Parquet files of an audit data set and open DuckDB views over them.

Only complete files are read: writers create ``.<name>.inprogress`` files and rename them
when done, and hidden files are never listed. Every file's footer is checked before DuckDB
sees it, so one corrupt or truncated file is named and skipped instead of failing the whole
report; a file whose footer reads but whose pages DuckDB cannot decode is found when the
first query fails, named and skipped the same way. Object-store URLs (``s3://…``) are
handed to DuckDB as a glob (``httpfs``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from retryscope.analytics.filters import apply
from retryscope.analytics.queries import install_base

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

    @property
    def is_remote(self) -> bool:
        return "://" in self.root


def _is_visible(name: str) -> bool:
    return not name.startswith((".", "_")) and name.endswith(".parquet")


def discover(root: str | os.PathLike[str]) -> DataSet:
    """All readable span files under ``root`` (a directory, a file, or an ``s3://`` prefix)."""
    text = os.fspath(root)
    if "://" in text:
        glob = text if text.endswith(".parquet") else text.rstrip("/") + "/**/*.parquet"
        return DataSet(text, (glob,))
    path = Path(text)
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = sorted(
            Path(dirpath) / name
            for dirpath, dirnames, filenames in os.walk(path)
            for name in filenames
            if _is_visible(name)
            and not any(part.startswith(".") for part in Path(dirpath).relative_to(path).parts)
        )
    else:
        raise FileNotFoundError(f"no audit data at {text!r}: not a file or directory")
    files: list[str] = []
    skipped: list[SkippedFile] = []
    for candidate in candidates:
        try:
            meta = pq.read_metadata(candidate)
            if "span_id" not in meta.schema.names:
                raise ValueError("not a retryscope span file (no span_id column)")
        except Exception as exc:  # corrupt, truncated, zero-byte, unreadable, foreign
            skipped.append(SkippedFile(str(candidate), f"{type(exc).__name__}: {exc}"))
            continue
        files.append(str(candidate))
    return DataSet(text, tuple(files), tuple(skipped))


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def connect(
    data: DataSet | str | os.PathLike[str],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
) -> tuple[duckdb.DuckDBPyConnection, DataSet]:
    """A DuckDB connection with views ``spans``, ``attempts``, ``logical_requests`` and
    the analytics tables of ``sql/base.sql`` and ``sql/scope.sql`` (``physical_attempts``,
    ``requests``, ``attempt_facts``, ...), with no filters applied.

    An empty data set still gets the views (over an empty table of the current schema), so
    every query works and returns zero rows.
    """
    dataset = data if isinstance(data, DataSet) else discover(data)
    if con is None:
        con = duckdb.connect(":memory:")
        # CREATE TABLE AS in parallel; every query that needs an order says ORDER BY
        con.execute("SET preserve_insertion_order = false")
    try:
        _install(con, dataset)
    except duckdb.Error:
        # A file whose footer is intact can still hold pages DuckDB cannot decode (a bit
        # flip, a torn write by a foreign tool). Find it (only on this failure path), name
        # it as skipped and answer from the rest.
        bad = {} if dataset.is_remote else _undecodable(dataset.files)
        if not bad:
            raise
        dataset = DataSet(
            dataset.root,
            tuple(f for f in dataset.files if f not in bad),
            (*dataset.skipped, *(SkippedFile(f, why) for f, why in bad.items())),
        )
        _install(con, dataset)
    return con, dataset


def _undecodable(files: tuple[str, ...]) -> dict[str, str]:
    """The files DuckDB cannot read to the end, with the error it gives."""
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
    return bad


def _install(con: duckdb.DuckDBPyConnection, dataset: DataSet) -> None:
    con.register("_retryscope_empty", SPAN_SCHEMA.empty_table())
    if dataset.files:
        file_list = "[" + ", ".join(_sql_string(f) for f in dataset.files) + "]"
        con.execute(
            "CREATE OR REPLACE VIEW spans AS SELECT * FROM read_parquet("
            f"{file_list}, union_by_name = true, hive_partitioning = false) "
            # every column of the current schema exists, even if older files lack it
            "UNION ALL BY NAME SELECT * FROM _retryscope_empty"
        )
    else:
        con.execute("CREATE OR REPLACE VIEW spans AS SELECT * FROM _retryscope_empty")
    con.execute(VIEWS_SQL)
    install_base(con)
    apply(con)
    from retryscope.analytics import policy_drift  # needs the base macros and `requests`

    policy_drift.install(con, dataset)
