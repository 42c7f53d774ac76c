"""The per-request and per-route tables the analyses of a scope read: ``request_facts``
(``sql/scope/request_facts.sql`` with the doomed dispatches of
``sql/scope/doomed_dispatches.sql``) and ``route_latency`` (``sql/scope/route_latency.sql``),
each a view onto one of two stored copies: ``all_*`` over every request, part of the
model (an unfiltered analysis then starts without building them), or ``scoped_*`` over
the requests the filters select, built by :func:`~retryscope.analytics._filters.apply`;
and the view ``doomed_attempts`` (``sql/scope/doomed_attempts.sql``) over the scope's
attempts and ``route_latency``, which the doomed dispatches count and the findings list.

The doomed dispatches compare each attempt with its route's median latency over the
whole scope, so the model builds ``all_request_facts`` with its per-request tables (per
time partition) and ``all_route_latency`` and ``all_doomed_dispatches`` over all of them.
"""

from __future__ import annotations

from typing import Final, Literal

import duckdb

from retryscope.analytics._queries import load

Copy = Literal["all", "scoped"]
_COPIES: Final = ("all", "scoped")
REQUEST_FACTS: Final = "request_facts"
"""Per request, from its own attempts only: built with the model's per-request tables."""
ACROSS_REQUESTS: Final = ("route_latency", "doomed_dispatches")
"""Built in this order over the scope's requests: the doomed dispatches read the latency."""
DOOMED_ATTEMPTS: Final = "doomed_attempts"
"""The view of the doomed dispatches as attempts (never stored: see its SQL)."""
SOURCES: Final = (REQUEST_FACTS, *ACROSS_REQUESTS, DOOMED_ATTEMPTS)


def build_request_facts(con: duckdb.DuckDBPyConnection, copy: Copy) -> None:
    """``{copy}_request_facts`` from the scope's views (``requests``, ``attempt_facts``,
    ``request_nesting``), a temp table."""
    _create(con, copy, REQUEST_FACTS)


def build_across_requests(con: duckdb.DuckDBPyConnection, copy: Copy) -> None:
    """``{copy}_route_latency`` and ``{copy}_doomed_dispatches`` from the scope's views
    (temp tables), and the views ``route_latency`` and ``request_facts`` onto the copy."""
    latency, doomed = ACROSS_REQUESTS
    _create(con, copy, latency)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW route_latency AS SELECT * FROM {_name(copy, latency)}"
    )
    _view_doomed_attempts(con)
    _create(con, copy, doomed)
    point(con, copy)


def build(con: duckdb.DuckDBPyConnection, copy: Copy) -> None:
    """Every table of ``copy`` from the scope's views, and the views onto them."""
    build_request_facts(con, copy)
    build_across_requests(con, copy)


def point(con: duckdb.DuckDBPyConnection, copy: Copy) -> None:
    """Point the views ``route_latency`` and ``request_facts`` at the tables of ``copy``
    (the request facts with their doomed dispatches, 0 when none)."""
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW route_latency AS SELECT * FROM {_name(copy, 'route_latency')}"
    )
    _view_doomed_attempts(con)
    con.execute(
        "CREATE OR REPLACE TEMP VIEW request_facts AS "
        "SELECT f.*, coalesce(d.doomed_dispatches, 0)::BIGINT AS doomed_dispatches "
        f"FROM {_name(copy, REQUEST_FACTS)} f "
        f"LEFT JOIN {_name(copy, 'doomed_dispatches')} d ON d.h = f.h"
    )


def _view_doomed_attempts(con: duckdb.DuckDBPyConnection) -> None:
    """The view ``doomed_attempts`` over the views ``attempt_facts`` and ``route_latency``."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW {DOOMED_ATTEMPTS} AS\n{load(DOOMED_ATTEMPTS)}")


def _create(con: duckdb.DuckDBPyConnection, copy: Copy, table: str) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_name(copy, table)} AS\n{load(table)}")


def _name(copy: Copy, table: str) -> str:
    if copy not in _COPIES:  # the only names ever formatted into this SQL
        raise ValueError(f"unknown copy {copy!r}")
    return f"{copy}_{table}"
