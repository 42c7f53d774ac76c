"""Small queries an interactive browser of the data set needs beside the metrics: the
values its filters offer, the time the data covers, the nested-retry requests to open, and
retry success by failure kind × ordinal. SQL in ``analytics/sql/<name>.sql``."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from retryscope.analytics._filters import Filters, apply
from retryscope.analytics._queries import arrow
from retryscope.analytics.model._build import ensure_model


def dimension_values(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """``dimension`` (tenant | operation | route), ``value``, ``logical_requests`` over the
    whole data set (filters do not narrow the choices they are made from)."""
    ensure_model(con)
    return arrow(con, "dimension_values")


def time_range(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """One row: first and last logical request start, and the number of requests."""
    ensure_model(con)
    return arrow(con, "time_range")


def nested_retry_requests(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None, limit: int = 100
) -> pa.Table:
    """Requests where ≥ 2 layers retried: their multiplication and its factors per layer."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    apply(con, filters)
    return arrow(con, "nested_retry_requests", {"limit": limit})


def retry_success_matrix(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> pa.Table:
    """Retries and their success rate per layer, preceding failure kind and ordinal."""
    apply(con, filters)
    return arrow(con, "retry_success_matrix")
