"""Build the audit model over ``spans`` (or attach it from the model cache), once per
connection: in one pass, or in request partitions when the data set is large for the memory
limit, into the cache file, a scratch file, or memory. The scripts and their order are in
:mod:`._scripts`."""

from __future__ import annotations

import logging
from functools import partial

import duckdb

from retryscope.analytics import _scope_facts as scope_facts
from retryscope.analytics._queries import load
from retryscope.analytics.model import _cache as model_cache
from retryscope.analytics.model import _partitions as model_partitions
from retryscope.analytics.model import _scripts as scripts
from retryscope.analytics.model._cache import ModelCache
from retryscope.analytics.model._scripts import model_script

_log = logging.getLogger(__name__)


def ensure_model(con: duckdb.DuckDBPyConnection, *, whole_data_set: bool = True) -> None:
    """Build the filter-independent tables of the audit model (:mod:`._scripts`) over
    ``spans`` the first time a query on ``con`` needs them (``connect`` builds nothing, so
    opening a data set and looking up one request stay cheap), or attach them from the
    model cache ``connect`` was given, when it is up to date (and save them there after a
    build). Over the whole data set the model also holds the unfiltered scope's
    ``all_route_latency`` and ``all_request_facts``; a drill-down
    (``whole_data_set=False``) needs neither."""
    # one round trip: a drill-down runs this on a fresh cursor every time
    ((built, cache_setting, attached),) = con.execute(
        "SELECT getvariable('rs_model_built'), getvariable('rs_model_cache'),"
        " getvariable('rs_model_attached')"
    ).fetchall()
    if built:
        return

    cache = model_cache.from_setting(cache_setting)
    if cache is not None and model_cache.attach(con, cache):
        con.execute("SET VARIABLE rs_model_built = true")
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
    con.execute("SET VARIABLE rs_model_built = true")


def _build_into_scratch_file(con: duckdb.DuckDBPyConnection) -> bool:
    """Without a model cache, a data set large for the memory limit is still built in
    request partitions, into a file of its own in DuckDB's temporary directory (removed
    once attached: the open file stays readable until the connection closes). False when
    one pass will do (the model is then built in memory, spilling if it must) or the file
    could not be written."""

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
    :func:`~retryscope.analytics.model._cache.build_into`), in ``partitions`` request
    partitions when given, again over the files that decode when one does not; False when
    the file was not written (the model is then built in memory)."""

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
    see :mod:`~retryscope.analytics.model._partitions`)."""

    if partitions is None:
        partitions = model_partitions.configured_partitions(con)
    con.execute("SET VARIABLE rs_model_partitions = ?", [partitions])
    if partitions == 1:
        _build_model(con, whole_data_set=True, temporary=False)
        return
    _log.info("building the model in %d request partitions", partitions)
    model_partitions.build(con, partitions, _build_per_request)
    _build_whole_data_set(con, temporary=False)


def _build_per_request(con: duckdb.DuckDBPyConnection) -> None:
    _build_requests(con, whole_data_set=True, temporary=True)


def _build_guarded(
    con: duckdb.DuckDBPyConnection, *, whole_data_set: bool, temporary: bool
) -> None:
    """:func:`_build_model`, again over the files that decode when one does not."""
    try:
        _build_model(con, whole_data_set=whole_data_set, temporary=temporary)
    except duckdb.Error as exc:
        if not _dropped_undecodable_files(con, exc):
            raise
        _build_model(con, whole_data_set=whole_data_set, temporary=temporary)


def _dropped_undecodable_files(con: duckdb.DuckDBPyConnection, exc: duckdb.Error) -> bool:
    """Whether the build's failure ``exc`` came from data files that do not decode, now
    skipped (reading every file to find them is pointless when DuckDB ran out of memory)."""
    from retryscope.analytics._dataset import drop_undecodable_files

    return not isinstance(exc, duckdb.OutOfMemoryException) and drop_undecodable_files(con)


def _build_model(con: duckdb.DuckDBPyConnection, *, whole_data_set: bool, temporary: bool) -> None:
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
    for name in scripts.PER_REQUEST:
        if name == scripts.HTTP_ATTEMPTS and not (
            whole_data_set or con.execute(load("unmarked_http_spans")).fetchall()[0][0]
        ):
            continue
        con.execute(model_script(name, temporary=temporary))


def _build_whole_data_set(con: duckdb.DuckDBPyConnection, *, temporary: bool) -> None:
    """The telemetry checks and the unfiltered scope's tables, over the finished model."""
    for name in scripts.WHOLE_DATA_SET:
        con.execute(model_script(name, temporary=temporary))
    scope_facts.build(con, "all", temporary=temporary)
