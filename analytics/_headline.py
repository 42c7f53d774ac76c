"""The headline figures: what the Overview's first row shows, the report's figures of the
same keys, read from the model's rollups when it keeps them.

A model kept in a model cache holds, per time partition, small rollups of its requests
(:mod:`retryscope.analytics.model._rollups`: per hour of a request's start, tenant,
operation and the routes it made an attempt on, the additive parts of each figure). The
headline sums the parts of the rows the filters select and divides them with the report's
macros (``sql/metrics/headline_*.sql``), so it equals the report's figures exactly while
reading a few rows per hour instead of every request. A time bound within an hour adds
the rollups of the requests started in that part of the hour, computed from the model's
facts as a build computes them. A model without rollups (in memory, attached) is read
through the report's own metrics.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from retryscope.analytics import _metrics as metrics
from retryscope.analytics._filters import Filters, naive_utc
from retryscope.analytics._queries import arrow
from retryscope.analytics._report import _FLOATS, _numbers, _one
from retryscope.analytics.model._rollups import sum_over

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

REQUEST_KEYS: Final = (
    "logical_requests",
    "physical_attempts",
    "receiver_attempts",
    "operations",
    "sends_per_request",
    "amplification_ratio",
    "requests_with_fallback",
    "fallback_rate",
    "deadline_exhausted",
    "deadline_exhausted_rate",
)
"""The report's top-level keys the headline holds (beside ``cost.by_currency``)."""


def headline(model: AuditModel, filters: Filters | None = None) -> dict[str, Any]:
    """The report's :data:`REQUEST_KEYS` and ``cost`` (``{"by_currency": [...]}``) over the
    requests ``filters`` select: from the rollups when the model keeps them, else from the
    model's tables. Either way the values equal ``build_report``'s."""
    f = filters or Filters()
    found = from_rollups(model, f)
    return found if found is not None else from_model(model, f)


def from_rollups(model: AuditModel, filters: Filters) -> dict[str, Any] | None:
    """The headline from the rollups, or None when the model keeps none. The whole hours
    within the time bounds are read from the rollups; the requests started in the rest of
    the range (a bound within an hour) are rolled up from the model's facts as a build
    rolls them up, and added."""
    rollups = model.build().rollups
    if not rollups:
        return None
    since, until = (None if t is None else naive_utc(t) for t in (filters.since, filters.until))
    whole, edges = split_hours(since, until)
    # the filters are bound to these queries alone, on a cursor of their own: the model's
    # scope stays as it is
    cur = model.con.cursor()
    try:
        sum_over(cur, rollups, whole, edges)
        # the tables hold the rows of the time range: the other filters select among them
        params = {**filters.values(), "since": None, "until": None}
        row = arrow(cur, "headline_requests", params).to_pylist()[0]
        return _shaped(row, arrow(cur, "headline_cost", params))
    finally:
        cur.close()


def split_hours(
    since: datetime | None, until: datetime | None
) -> tuple[tuple[datetime | None, datetime | None], list[tuple[datetime, datetime]]]:
    """[``since``, ``until``) (None: unbounded; since < until) as the whole hours within
    it, [first, last) (first ≥ last: none), and the parts of hours left at its ends."""
    if since is not None and until is not None:
        first, last = _hour_at_or_after(since), _hour(until)
        if first >= last:  # within an hour, or across one hour's end: no whole hour
            return (first, last), [(since, until)]
        return (first, last), [(a, b) for a, b in ((since, first), (last, until)) if a < b]
    if since is not None:
        first = _hour_at_or_after(since)
        return (first, None), [(since, first)] if since < first else []
    if until is not None:
        last = _hour(until)
        return (None, last), [(last, until)] if last < until else []
    return (None, None), []


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _hour_at_or_after(t: datetime) -> datetime:
    start = _hour(t)
    return start if start == t else start + timedelta(hours=1)


def from_model(model: AuditModel, filters: Filters) -> dict[str, Any]:
    """The headline from the model's tables: the overall rows of the report's metrics,
    shaped as the report shapes them."""
    overall = metrics.amplification(model, filters=filters)
    row = {
        "logical_requests": overall.column("logical_requests")[0].as_py()
        if overall.num_rows
        else 0,
        **_one(overall),
        **_one(metrics.fallback(model, filters=filters)),
        **_one(metrics.deadline(model, filters=filters)),
    }
    costs = metrics.cost(model, filters=filters).drop_columns(["value"])
    return _shaped(row, costs)


def _shaped(row: dict[str, Any], cost: pa.Table) -> dict[str, Any]:
    return {
        **_numbers({k: row[k] for k in REQUEST_KEYS}, _FLOATS),
        "cost": {"by_currency": [_numbers(r, _FLOATS) for r in cost.to_pylist()]},
    }
