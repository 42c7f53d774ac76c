"""The analytics SQL, loaded by name from ``analytics/sql/*.sql``, and how it is run.

All SQL of the analytics lives in those files; Python binds parameters (never formats
values into SQL) and gets Arrow tables back.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import duckdb
import pyarrow as pa


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
    try:
        _build_base(con, whole_data_set=whole_data_set)
    except duckdb.Error:
        from retryscope.analytics.dataset import drop_undecodable_files

        if not drop_undecodable_files(con):
            raise
        _build_base(con, whole_data_set=whole_data_set)  # over the files that decode
    con.execute("SET VARIABLE rs_base_built = true")
    if cache is not None:
        model_cache.save(con, cache)


def _build_base(con: duckdb.DuckDBPyConnection, *, whole_data_set: bool) -> None:
    """The model's three scripts (a drill-down's request without unmarked HTTP client
    spans skips the classification of HTTP sends: nothing to classify); over the whole data
    set also the telemetry checks and the unfiltered scope's per-request facts. Every
    statement that reads ``spans`` runs here, where an undecodable file is caught."""
    con.execute(load("base_attempts"))
    if whole_data_set or con.execute(load("unmarked_http_spans")).fetchall()[0][0]:
        con.execute(load("base_http_attempts"))
    con.execute(load("base"))
    if whole_data_set:
        from retryscope.analytics import scope_facts

        con.execute(load("model_checks"))
        con.execute(load("scope_unfiltered"))
        scope_facts.build(con, "all")
