"""One logical request, looked up by logical request id, trace id or idempotency digest.

A lookup never builds the data set's analytics tables: it copies the rows of the requests
``ident`` names into a table ``spans`` local to a cursor of ``con`` (the files are sorted by
logical request id, so row-group statistics skip almost everything) and runs the same
``base.sql``/``scope.sql`` over those rows alone. Every figure of a request depends only on
its own rows, so the result equals the same query over the whole data set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from retryscope.analytics.filters import apply
from retryscope.analytics.queries import arrow, load


@contextmanager
def _request_scope(
    con: duckdb.DuckDBPyConnection, ident: str
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of ``con`` whose analytics tables hold only the requests ``ident`` names."""
    cur = con.cursor()
    try:
        cur.execute(load("request_spans"), {"id": ident})
        found = cur.execute("SELECT count(*) FROM spans").fetchall()[0][0]
        if not found:
            cur.execute(load("request_spans_by_alias"), {"id": ident})
        apply(cur)
        yield cur
    finally:
        cur.close()


def request_summary(con: duckdb.DuckDBPyConnection, ident: str) -> pa.Table:
    """The logical requests ``ident`` names (an idempotency digest may name several)."""
    with _request_scope(con, ident) as cur:
        return arrow(cur, "request_summary", {"id": ident})


def request_attempts(con: duckdb.DuckDBPyConnection, ident: str) -> pa.Table:
    """Their attempts in order: route, layer, times, backoff, not_before, deadline
    remaining, cost, outcome, decision."""
    with _request_scope(con, ident) as cur:
        return arrow(cur, "request", {"id": ident})


def request_detail(con: duckdb.DuckDBPyConnection, ident: str) -> tuple[pa.Table, pa.Table]:
    """:func:`request_summary` and :func:`request_attempts` from one lookup (what
    ``retryscope request`` prints)."""
    with _request_scope(con, ident) as cur:
        return arrow(cur, "request_summary", {"id": ident}), arrow(cur, "request", {"id": ident})
