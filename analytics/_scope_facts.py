"""The per-route and per-request tables the analyses of a scope read, ``route_latency`` and
``request_facts`` (``sql/route_latency.sql``, ``sql/request_facts.sql``), each a view onto
one of two stored copies: ``all_*`` over every request, built with the model (and cached
with it: an unfiltered analysis then starts without building them), or ``scoped_*`` over
the requests the filters select, built by :func:`~retryscope.analytics._filters.apply`."""

from __future__ import annotations

from typing import Final, Literal

import duckdb

from retryscope.analytics._queries import load

Copy = Literal["all", "scoped"]
_COPIES: Final = ("all", "scoped")
TABLES: Final = ("route_latency", "request_facts")
"""Built in this order: request_facts reads route_latency."""


def build(con: duckdb.DuckDBPyConnection, copy: Copy, *, temporary: bool = True) -> None:
    """Build the ``copy`` tables from the scope's views (``requests``, ``attempt_facts``,
    ``request_nesting``) and point the views at them (persistent tables in the default
    database when not ``temporary``: the model built into its cache file)."""
    if copy not in _COPIES:  # the only names ever formatted into this SQL
        raise ValueError(f"unknown copy {copy!r}")
    for table in TABLES:
        create = "CREATE OR REPLACE TEMP TABLE" if temporary else "CREATE OR REPLACE TABLE"
        con.execute(f"{create} {copy}_{table} AS\n{load(table)}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {copy}_{table}")


def use_all(con: duckdb.DuckDBPyConnection) -> None:
    """Point the views at the model's copies (the unfiltered scope)."""
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM all_{table}")
