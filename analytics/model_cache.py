"""The audit model (the tables of ``sql/base.sql``) saved to a DuckDB file, so the next
connection to an unchanged data set skips the build.

Building the model is most of a report's time on a large data set (≈ 45 s at 10 M
attempts on 2 cores) and every ``retryscope report``, ``findings``, ``whatif`` or UI start
would pay it again, filters or not. With a cache directory, the first build is saved
there (one file per data set) and later connections attach it read-only, as long as its
fingerprint still matches: the data set's files (path, size, modification time), the
model's SQL, and the retryscope and DuckDB versions. Anything else (a new file, a changed
file, an upgraded package, an unreadable cache file) rebuilds the model and replaces the
file; a cache is never trusted without that match. Object-store data sets (``s3://``) are
not cached: listing sizes and times there is not free.

The cache file holds derived data only (the same rows as the Parquet files, per attempt
and per request); keep the directory as private as the data set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from retryscope import __version__
from retryscope.analytics.queries import load

MODEL_TABLES: Final = (
    "request_base",
    "reconciliations",
    "all_attempt_facts",
    "all_request_nesting",
    "all_request_layers",
    "all_receiver_traffic",
    "all_route_latency",
    "all_request_facts",
    "span_anomalies",
    "ordinal_anomalies",
    "ordinal_gaps",
    "idempotency_conflicts",
)
"""The tables ``base.sql`` leaves behind (``physical_attempts`` is a view of one of them),
the telemetry checks of ``model_checks.sql``, and the unfiltered scope's copies of
``route_latency`` and ``request_facts``."""

CACHE_ENV: Final = "RETRYSCOPE_MODEL_CACHE"
"""Environment variable naming the cache directory (CLI and UI default)."""

_log = logging.getLogger(__name__)

_FORMAT: Final = 1  # bump when the cache file's own layout changes
_ALIAS: Final = "rs_model"


@dataclass(frozen=True, slots=True)
class ModelCache:
    """Where one data set's model is cached and the fingerprint it must carry."""

    path: Path
    fingerprint: str


def model_cache(
    root: str, files: tuple[str, ...], directory: str | os.PathLike[str]
) -> ModelCache | None:
    """The cache of the data set ``root`` (its readable ``files``) in ``directory``, or
    None for an object-store data set. Stats every file (cheap: no reads)."""
    if "://" in root:
        return None
    digest = hashlib.sha256()
    for part in (
        f"format {_FORMAT}",
        f"retryscope {__version__}",
        f"duckdb {duckdb.__version__}",
        load("macros"),
        load("base_attempts"),
        load("base_http_attempts"),
        load("base"),
        load("model_checks"),
        load("scope_unfiltered"),
        load("route_latency"),
        load("request_facts"),
    ):
        digest.update(part.encode() + b"\0")
    for f in files:
        st = os.stat(f)
        digest.update(f"{os.path.abspath(f)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    name = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:16]
    return ModelCache(Path(directory) / f"model-{name}.duckdb", digest.hexdigest())


def configured(con: duckdb.DuckDBPyConnection) -> ModelCache | None:
    """The model cache :func:`~retryscope.analytics.dataset.connect` set up on ``con``
    (None without one, and on cursors: a drill-down builds its own small model)."""
    rows = con.execute("SELECT getvariable('rs_model_cache')").fetchall()
    return from_setting(rows[0][0] if rows else None)


def from_setting(value: object) -> ModelCache | None:
    """The cache named by the ``rs_model_cache`` variable's value (path, fingerprint)."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    path, fingerprint = value
    return ModelCache(Path(str(path)), str(fingerprint))


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Undo :func:`attach` on ``con`` (its views, the attached file), so the model can be
    built there instead."""
    views = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND view_name IN ?",
        [[*MODEL_TABLES, "physical_attempts"]],
    ).fetchall()
    for (view,) in views:
        con.execute(f"DROP VIEW temp.main.{view}")
    con.execute(f"DETACH DATABASE IF EXISTS {_ALIAS}")
    con.execute("SET VARIABLE rs_model_attached = false")


def attach(con: duckdb.DuckDBPyConnection, cache: ModelCache) -> bool:
    """Point the model's table names on ``con`` at the cached model, read-only, and record
    the files its build had to skip as undecodable. False when the cache is missing, stale
    or unreadable (then nothing on ``con`` changed)."""
    release(con)
    if not cache.path.is_file():
        return False
    try:
        con.execute(f"ATTACH ? AS {_ALIAS} (READ_ONLY)", [str(cache.path)])
    except duckdb.Error as exc:
        _warn(
            f"model cache {cache.path} is unreadable ({type(exc).__name__}: {exc}); rebuilding it"
        )
        return False
    try:
        info = dict(con.execute(f"SELECT key, value FROM {_ALIAS}.model_info").fetchall())
        if info.get("fingerprint") != cache.fingerprint:
            con.execute(f"DETACH {_ALIAS}")
            return False
        skipped = {str(p): str(r) for p, r in json.loads(info.get("skipped", "[]"))}
        built = con.execute(  # an earlier build on con (of another data set) gives way
            "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name IN ?",
            [list(MODEL_TABLES)],
        ).fetchall()
        for (table,) in built:
            con.execute(f"DROP TABLE temp.main.{table}")
        for table in MODEL_TABLES:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {_ALIAS}.{table}")
    except (duckdb.Error, ValueError, TypeError) as exc:
        release(con)
        _warn(f"model cache {cache.path} is damaged ({type(exc).__name__}: {exc}); rebuilding it")
        return False
    con.execute("CREATE OR REPLACE TEMP VIEW physical_attempts AS SELECT * FROM all_attempt_facts")
    con.execute("SET VARIABLE rs_model_attached = true")
    if skipped:  # what the cached build skipped, later queries of `spans` skip too
        from retryscope.analytics.dataset import skip_files

        skip_files(con, skipped)
    return True


def save(con: duckdb.DuckDBPyConnection, cache: ModelCache) -> bool:
    """Write the model just built on ``con`` to the cache: into a temporary file beside it,
    then renamed over it (readers of an older cache keep theirs). A cache that cannot be
    written is reported and skipped; the analysis goes on. Returns whether it was saved."""
    tmp = cache.path.with_name(f".{cache.path.name}.{os.getpid()}.tmp")
    skipped = con.execute("SELECT path, reason FROM _retryscope_skipped ORDER BY path").fetchall()
    info = [("fingerprint", cache.fingerprint), ("skipped", json.dumps(skipped))]
    try:
        cache.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        con.execute("ATTACH ? AS rs_model_out", [str(tmp)])
        try:
            for table in MODEL_TABLES:
                con.execute(f"CREATE TABLE rs_model_out.{table} AS SELECT * FROM temp.main.{table}")
            con.execute("CREATE TABLE rs_model_out.model_info (key VARCHAR, value VARCHAR)")
            con.executemany("INSERT INTO rs_model_out.model_info VALUES (?, ?)", info)
        finally:
            con.execute("DETACH rs_model_out")
        os.replace(tmp, cache.path)
    except (OSError, duckdb.Error) as exc:
        _remove(tmp)
        _warn(f"model cache {cache.path} not written ({type(exc).__name__}: {exc})")
        return False
    except BaseException:  # interrupted (Ctrl-C): leave no half-written file behind
        _remove(tmp)
        raise
    return True


def _remove(tmp: Path) -> None:
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        with contextlib.suppress(OSError):
            leftover.unlink(missing_ok=True)


def _warn(message: str) -> None:
    _log.warning(message)
