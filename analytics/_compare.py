"""Compare a slice of the scope against its baseline (the scope's other requests): every
dimension's values ranked by how much more often the slice's requests take them, and the
slice's requests taking one value. The slice is a Requests explorer query
(:class:`RequestQuery`, its limit and sort unused) over a time range. SQL in
``sql/lookups/compare*.sql``; the requests' figures are the explorer's rows."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from retryscope.analytics._browse import (
    COMPARE_DIMENSIONS,
    RequestQuery,
    ensure_compare_values,
    ensure_request_rows,
)
from retryscope.analytics._filters import Filters, naive_utc
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS, Thresholds
from retryscope.analytics._queries import arrow

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

_EVERY = RequestQuery()


def _params(
    model: AuditModel,
    query: RequestQuery,
    filters: Filters | None,
    since: datetime | None,
    until: datetime | None,
    thresholds: Thresholds,
) -> dict[str, object]:
    if since is not None and until is not None and naive_utc(since) >= naive_utc(until):
        raise ValueError("the slice's start must be before its end")
    model.scoped(filters)
    ensure_request_rows(model, thresholds)
    ensure_compare_values(model)
    return {
        **query.params(),
        "since": None if since is None else naive_utc(since),
        "until": None if until is None else naive_utc(until),
    }


def compare(
    model: AuditModel,
    query: RequestQuery = _EVERY,
    *,
    filters: Filters | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """The requests ``query`` selects among those of the scope started in [``since``,
    ``until``) against the scope's others: per dimension (:data:`COMPARE_DIMENSIONS`) and
    value, the requests of each side taking it, each side's size, their shares and the
    ``difference`` (slice share − baseline share); the dimension of the largest
    difference first, its values by theirs."""
    params = _params(model, query, filters, since, until, thresholds)
    return arrow(model.con, "compare", params)


def compare_requests(
    model: AuditModel,
    query: RequestQuery,
    dimension: str,
    value: str,
    *,
    filters: Filters | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 200,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[int, pa.Table]:
    """The requests of a :func:`compare` slice taking ``value`` in ``dimension``: how many,
    and the first ``limit`` (most excess attempts first) as the Requests explorer's rows."""
    if dimension not in COMPARE_DIMENSIONS:
        raise ValueError(
            f"no dimension {dimension!r} (dimensions: {', '.join(COMPARE_DIMENSIONS)})"
        )
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    params = _params(model, query, filters, since, until, thresholds)
    rows = arrow(
        model.con,
        "compare_requests",
        {**params, "dimension": dimension, "value": value, "limit": limit},
    )
    total = int(rows.column("matching")[0].as_py()) if rows.num_rows else 0
    return total, rows.drop_columns(["matching"])
