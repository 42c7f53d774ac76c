"""The analytics SQL, loaded by name from ``analytics/sql/*.sql``, and how it is run.

All SQL of the analytics lives in those files; Python binds parameters (never formats
values into SQL) and gets Arrow tables back.
"""

from __future__ import annotations

import logging
from functools import cache, partial
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa

if TYPE_CHECKING:
    from retryscope.analytics.model_cache import ModelCache


_log = logging.getLogger(__name__)


@cache
def load(name: str) -> str:
    """The text of ``sql/<name>.sql`` shipped with this package."""
    path = resources.files("retryscope.analytics").joinpath("sql", f"{name}.sql")
    if not path.is_file():
        raise ValueError(f"no analytics query named {name!r}")
    return path.read_text(encoding="utf-8")


def arrow(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pa.Table:
    """Run query ``name`` with named parameters (``$name`` in the SQL) and return Arrow."""
    table: pa.Table = con.sql(load(name), params=params or {}).to_arrow_table()
    return table


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    """Create the macros of ``macros.sql`` (cheap: nothing is read)."""
    con.execute(load("macros"))


def ensure_base(con: duckdb.DuckDBPyConnection, *, whole_data_set: bool = True) -> None:
    """Build the filter-independent tables of ``base.sql`` over ``spans`` the first time a
    query on ``con`` needs them (``connect`` builds nothing, so opening a data set and
    looking up one request stay cheap), or attach them from the model cache ``connect``
    was given, when it is up to date (and save them there after a build). Over the whole
    data set the model also holds the unfiltered scope's ``all_route_latency`` and
    ``all_request_facts``; a drill-down (``whole_data_set=False``) needs neither."""
    # one round trip: a drill-down runs this on a fresh cursor every time
    ((built, cache_setting, attached),) = con.execute(
        "SELECT getvariable('rs_base_built'), getvariable('rs_model_cache'),"
        " getvariable('rs_model_attached')"
    ).fetchall()
    if built:
        return
    from retryscope.analytics import model_cache

    cache = model_cache.from_setting(cache_setting)
    if cache is not None and model_cache.attach(con, cache):
        con.execute("SET VARIABLE rs_base_built = true")
        return
    if attached:
        model_cache.release(con)  # a model attached earlier on con (another data set's)
    if whole_data_set and cache is not None:
        written = _build_into_cache(con, cache)
    elif whole_data_set:
        written = _build_into_scratch_file(con)
    else:  # a drill-down's model is one request's: never cached
        written = False
    if not written:
        _build_guarded(con, whole_data_set=whole_data_set, temporary=True)
    con.execute("SET VARIABLE rs_base_built = true")


def _build_into_scratch_file(con: duckdb.DuckDBPyConnection) -> bool:
    """Without a model cache, a data set large for the memory limit is still built in
    request partitions, into a file of its own in DuckDB's temporary directory (removed
    once attached: the open file stays readable until the connection closes). False when
    one pass will do (the model is then built in memory, spilling if it must) or the file
    could not be written."""
    from retryscope.analytics import model_cache, model_partitions

    partitions = model_partitions.configured_partitions(con)
    if partitions == 1:
        return False
    scratch = model_cache.scratch_file(con)
    written = _build_into_cache(con, scratch, partitions)
    if written:
        model_cache.forget(scratch)
    return written


def _build_into_cache(
    con: duckdb.DuckDBPyConnection, cache: ModelCache, partitions: int | None = None
) -> bool:
    """Build the whole data set's model straight into its cache file (see
    :func:`~retryscope.analytics.model_cache.build_into`), in ``partitions`` request
    partitions when given, again over the files that decode when one does not; False when
    the file was not written (the model is then built in memory)."""
    from retryscope.analytics import model_cache

    build = (
        _build_persistent
        if partitions is None
        else partial(_build_persistent, partitions=partitions)
    )
    while True:
        try:
            return model_cache.build_into(con, cache, build)
        except duckdb.Error as exc:
            if _dropped_undecodable_files(con, exc):
                continue
            if isinstance(exc, duckdb.OutOfMemoryException):
                raise  # in memory it would need more still
            model_cache.not_written(cache, exc)  # not the data: e.g. the disk is full
            return False


def _build_persistent(con: duckdb.DuckDBPyConnection, partitions: int | None = None) -> None:
    """The whole data set's model into the cache file: in one pass, or in request
    partitions (``partitions``, else as many as the data set needs for the memory limit;
    see :mod:`~retryscope.analytics.model_partitions`)."""
    from retryscope.analytics import model_partitions

    if partitions is None:
        partitions = model_partitions.configured_partitions(con)
    con.execute("SET VARIABLE rs_model_partitions = ?", [partitions])
    if partitions == 1:
        _build_base(con, whole_data_set=True, temporary=False)
        return
    _log.info("building the model in %d request partitions", partitions)
    model_partitions.build(con, partitions, _build_per_request)
    _build_whole_data_set(con, temporary=False)


def _build_per_request(con: duckdb.DuckDBPyConnection) -> None:
    _build_requests(con, whole_data_set=True, temporary=True)


def _build_guarded(
    con: duckdb.DuckDBPyConnection, *, whole_data_set: bool, temporary: bool
) -> None:
    """:func:`_build_base`, again over the files that decode when one does not."""
    try:
        _build_base(con, whole_data_set=whole_data_set, temporary=temporary)
    except duckdb.Error as exc:
        if not _dropped_undecodable_files(con, exc):
            raise
        _build_base(con, whole_data_set=whole_data_set, temporary=temporary)


def _dropped_undecodable_files(con: duckdb.DuckDBPyConnection, exc: duckdb.Error) -> bool:
    """Whether the build's failure ``exc`` came from data files that do not decode, now
    skipped (reading every file to find them is pointless when DuckDB ran out of memory)."""
    from retryscope.analytics.dataset import drop_undecodable_files

    return not isinstance(exc, duckdb.OutOfMemoryException) and drop_undecodable_files(con)


def model_script(name: str, *, temporary: bool) -> str:
    """One of the model's scripts. They create their tables as ``CREATE OR REPLACE TEMP
    TABLE``; built into a model cache file (``temporary=False``) the tables are persistent
    ones in the connection's default database, which is then that file, and the
    intermediate ones the scripts drop again go to the scratch database
    :data:`SCRATCH_DATABASE` (so the cache file has no freed blocks)."""
    text = load(name)
    if temporary:
        return text
    for table in _INTERMEDIATE_TABLES:
        text = text.replace(
            f"{_TEMP_TABLE}{table} ", f"CREATE OR REPLACE TABLE {SCRATCH_DATABASE}.{table} "
        )
    return text.replace(_TEMP_TABLE, "CREATE OR REPLACE TABLE ")


SCRATCH_DATABASE: Final = "rs_model_scratch"
"""Where a build into the model cache keeps the intermediate tables (a file of its own)."""
_INTERMEDIATE_TABLES: Final = ("attempt_rows", "attempt_groups")
_TEMP_TABLE: Final = "CREATE OR REPLACE TEMP TABLE "


def _build_base(con: duckdb.DuckDBPyConnection, *, whole_data_set: bool, temporary: bool) -> None:
    """The model's per-request tables; over the whole data set also the telemetry checks
    and the unfiltered scope's per-request facts. Every statement that reads ``spans`` runs
    here, where an undecodable file is caught."""
    _build_requests(con, whole_data_set=whole_data_set, temporary=temporary)
    if whole_data_set:
        _build_whole_data_set(con, temporary=temporary)


def _build_requests(
    con: duckdb.DuckDBPyConnection, *, whole_data_set: bool, temporary: bool
) -> None:
    """The model's three per-request scripts (a drill-down's request without unmarked HTTP
    client spans skips the classification of HTTP sends: nothing to classify)."""
    con.execute(model_script("base_attempts", temporary=temporary))
    if whole_data_set or con.execute(load("unmarked_http_spans")).fetchall()[0][0]:
        con.execute(model_script("base_http_attempts", temporary=temporary))
    con.execute(model_script("base", temporary=temporary))


def _build_whole_data_set(con: duckdb.DuckDBPyConnection, *, temporary: bool) -> None:
    """The telemetry checks and the unfiltered scope's tables, over the finished model."""
    from retryscope.analytics import scope_facts

    con.execute(model_script("model_checks", temporary=temporary))
    con.execute(model_script("scope_unfiltered", temporary=temporary))
    scope_facts.build(con, "all", temporary=temporary)
