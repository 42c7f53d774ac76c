"""Break a figure down by a dimension over time: per time bucket and per value of one of
:data:`COMPARE_DIMENSIONS`, the figures of the requests behind it — the top values by the
figure's weight, the others as one series, and every request in scope (the report's
figures). Each figure is its rule's macro over the Requests explorer's rows, so a chart
point or a table cell lists exactly its requests (an explorer query taking that value,
over that bucket). SQL in ``sql/lookups/breakdown.sql``."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from retryscope.analytics._browse import (
    COMPARE_DIMENSIONS,
    ensure_compare_values,
    ensure_request_rows,
)
from retryscope.analytics._filters import Filters
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS, Thresholds
from retryscope.analytics._queries import arrow

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

BREAKDOWN_FIGURES: dict[str, str] = {
    "requests": "requests",
    "amplification": "retry amplification",
    "fallback_rate": "fallback rate",
    "deadline_exhausted": "deadline exhausted",
    "wasted": "wasted cost",
    "after_deadline": "cost after the deadline",
    "violations": "violations (error and warning findings)",
}
"""The figures a breakdown charts (columns of :func:`breakdown`), with their labels."""
MAX_TOP = 50
"""The most values a breakdown keeps apart from 'other'."""


def breakdown(
    model: AuditModel,
    dimension: str,
    figure: str = "requests",
    *,
    bucket: timedelta = timedelta(hours=1),
    top: int = 5,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """``figure`` (:data:`BREAKDOWN_FIGURES`; it picks the ``top`` values: those of most
    weight) broken down by ``dimension`` over ``bucket``-wide time buckets. Rows:
    ``series`` (``value``: one of the top values; ``other``: the requests with another
    value, once; ``all``: every request in scope), ``value``, ``start`` (the bucket; NULL:
    the whole time range), then every figure of :data:`BREAKDOWN_FIGURES` with
    ``excess_attempts``, ``fallback_requests``, ``deadline_exhausted_rate`` and
    ``max_past_deadline_ms`` (costs in micros)."""
    if dimension not in COMPARE_DIMENSIONS:
        raise ValueError(
            f"no dimension {dimension!r} (dimensions: {', '.join(COMPARE_DIMENSIONS)})"
        )
    if figure not in BREAKDOWN_FIGURES:
        raise ValueError(f"no figure {figure!r} (figures: {', '.join(BREAKDOWN_FIGURES)})")
    if not 1 <= top <= MAX_TOP:
        raise ValueError(f"top must be within [1, {MAX_TOP}], got {top}")
    micros = bucket // timedelta(microseconds=1)
    if micros <= 0:
        raise ValueError(f"time bucket must be positive, got {bucket}")
    model.scoped(filters)
    ensure_request_rows(model, thresholds)
    ensure_compare_values(model)
    return arrow(
        model.con,
        "breakdown",
        {"dimension": dimension, "figure": figure, "top": top, "bucket_us": micros},
    )
