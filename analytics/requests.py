"""One logical request, looked up by logical request id, trace id or idempotency digest."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from retryscope.analytics.filters import apply
from retryscope.analytics.queries import arrow


def request_summary(con: duckdb.DuckDBPyConnection, ident: str) -> pa.Table:
    """The logical requests ``ident`` names (an idempotency digest may name several)."""
    apply(con)
    return arrow(con, "request_summary", {"id": ident})


def request_attempts(con: duckdb.DuckDBPyConnection, ident: str) -> pa.Table:
    """Their attempts in order: route, layer, times, backoff, not_before, deadline
    remaining, cost, outcome, decision."""
    apply(con)
    return arrow(con, "request", {"id": ident})
