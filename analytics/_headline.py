"""The headline figures: what the Overview's first row shows, the report's figures of the
same keys, read from the model's rollups when they cover the filters.

A model kept in a model cache holds, per time partition, small rollups of its requests
(:mod:`retryscope.analytics.model._rollups`: per hour of a request's start, tenant,
operation and the routes it made an attempt on, the additive parts of each figure). The
headline sums the parts of the rows the filters select and divides them with the report's
macros (``sql/metrics/headline_*.sql``), so it equals the report's figures exactly while
reading a few rows per hour instead of every request. Filters the grain does not cover
(a time bound within an hour) and a model without rollups (in memory, attached) read the
model's tables through the report's own metrics.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from retryscope.analytics import _metrics as metrics
from retryscope.analytics._filters import Filters, naive_utc
from retryscope.analytics._queries import arrow
from retryscope.analytics._report import _FLOATS, _numbers, _one
from retryscope.analytics.model._rollups import present

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
    requests ``filters`` select: from the rollups when they cover the filters, else from
    the model's tables. Either way the values equal ``build_report``'s."""
    f = filters or Filters()
    found = from_rollups(model, f)
    return found if found is not None else from_model(model, f)


def covered(filters: Filters) -> bool:
    """Whether the rollups' grain covers ``filters``: time bounds on whole hours (tenant,
    operation and route are keys of every rollup row)."""
    return all(t is None or _whole_hour(t) for t in (filters.since, filters.until))


def _whole_hour(t: datetime) -> bool:
    return naive_utc(t).replace(minute=0, second=0, microsecond=0) == naive_utc(t)


def from_rollups(model: AuditModel, filters: Filters) -> dict[str, Any] | None:
    """The headline from the rollups, or None when the model has none or their grain does
    not cover ``filters``."""
    con = model.build().con
    if not covered(filters) or not present(con):
        return None
    params = filters.values()
    # the filters are bound to these queries alone: the model's scope stays as it is
    row = arrow(con, "headline_requests", params).to_pylist()[0]
    return _shaped(row, arrow(con, "headline_cost", params))


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
