"""The analytics SQL, loaded by name from ``analytics/sql/<stage>/*.sql``, and how it is run.

All SQL of the analytics lives in those files; Python binds parameters (never formats
values into SQL) and gets Arrow tables back.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import duckdb
import pyarrow as pa

from retryscope.schema import duckdb_columns, duckdb_type


@cache
def _sql_files() -> dict[str, Traversable]:
    """Every ``sql/<stage>/<name>.sql`` shipped with this package, by name (names are unique
    across the stages: model, scope, metrics, findings, lookups, replay)."""
    files: dict[str, Traversable] = {}
    for stage in resources.files("retryscope.analytics").joinpath("sql").iterdir():
        if not stage.is_dir():
            continue
        for sql in stage.iterdir():
            if sql.name.endswith(".sql"):
                name = sql.name.removesuffix(".sql")
                if name in files:
                    raise RuntimeError(f"two analytics queries named {name!r}")
                files[name] = sql
    return files


@cache
def load(name: str) -> str:
    """The text of the query ``name`` (``sql/<stage>/<name>.sql``) shipped with this package."""
    sql = _sql_files().get(name)
    if sql is None:
        raise ValueError(f"no analytics query named {name!r}")
    return sql.read_text(encoding="utf-8")


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal, for the few statements that cannot take a bound
    parameter (a view's file list, a rendered macro)."""
    return "'" + value.replace("'", "''") + "'"


def create_table(
    con: duckdb.DuckDBPyConnection,
    table: str,
    schema: pa.Schema,
    columns: Sequence[Sequence[Any]] = (),
    *,
    temp: bool = False,
) -> None:
    """Create (or replace) ``table`` with the columns of ``schema`` and the rows given
    column by column (one Python sequence per field; none: empty), each column bound as a
    typed list: no Arrow object is handed to DuckDB, whose Python client imports pandas
    for one (about 0.4 s of a command's start)."""
    kind = "TEMP TABLE" if temp else "TABLE"
    con.execute(f"CREATE OR REPLACE {kind} {table} ({duckdb_columns(schema)})")
    if columns and any(columns):
        select = ", ".join(f"unnest(?::{duckdb_type(f.type)}[])" for f in schema)
        con.execute(f"INSERT INTO {table} SELECT {select}", [list(c) for c in columns])


def arrow(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pa.Table:
    """Run query ``name`` with named parameters (``$name`` in the SQL) and return Arrow."""
    table: pa.Table = con.sql(load(name), params=params or {}).to_arrow_table()
    return table
