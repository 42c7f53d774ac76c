"""Queries an interactive browser of the data set needs beside the metrics: the values its
filters offer, the time the data covers, the nested-retry requests to open, retry success
by failure kind × ordinal, the Requests explorer (a sortable, filterable page of logical
requests) and one request's span tree and findings. SQL in ``analytics/sql/<stage>/``.

Every figure these return is the model's (``request_facts``, ``attempt_facts``) or a
finding's (``finding_rows``): what the report and the CLI count, never derived a second way.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from retryscope.analytics._filters import Filters
from retryscope.analytics._findings import RULES_BY_ID, finding_params, install
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS, Thresholds, ensure_memo
from retryscope.analytics._queries import arrow, load
from retryscope.analytics._requests import request_scope

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel


def dimension_values(model: AuditModel) -> pa.Table:
    """``dimension`` (tenant | operation | route), ``value``, ``logical_requests`` over the
    whole data set (filters do not narrow the choices they are made from)."""
    return arrow(model.build().con, "dimension_values")


def class_names(model: AuditModel) -> dict[str, str]:
    """The readable name of each capability and behavior class digest that any span of the
    data set recorded one beside (``retryscope.*capability_name``, ``*behavior_class_name``):
    the UI shows it, the rules still compare the digest."""
    rows = arrow(model.build().con, "class_names").to_pylist()
    return {row["digest"]: row["name"] for row in rows}


def time_range(model: AuditModel) -> pa.Table:
    """One row: first and last logical request start, and the number of requests."""
    return arrow(model.build().con, "time_range")


def scope_time_range(model: AuditModel, *, filters: Filters | None = None) -> pa.Table:
    """One row: first and last start of the requests ``filters`` select, and their number."""
    return arrow(model.scoped(filters), "scope_time_range")


def nested_retry_requests(
    model: AuditModel, *, filters: Filters | None = None, limit: int = 100
) -> pa.Table:
    """Requests where ≥ 2 layers retried: their multiplication and its factors per layer."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return arrow(model.scoped(filters), "nested_retry_requests", {"limit": limit})


def retry_success_matrix(model: AuditModel, *, filters: Filters | None = None) -> pa.Table:
    """Retries and their success rate per layer, preceding failure kind and ordinal."""
    return arrow(model.scoped(filters), "retry_success_matrix")


class RequestSort(enum.StrEnum):
    """What the Requests explorer sorts by (a column of :func:`request_list`)."""

    STARTED = "started_at"
    DURATION = "duration_ms"
    ATTEMPTS = "attempts"
    RECEIVER_ATTEMPTS = "receiver_attempts"
    EXCESS = "excess_attempts"
    AMPLIFICATION = "amplification_ratio"
    RETRY_PRODUCT = "retry_product"
    COST = "cost_micros"
    WASTED = "wasted_micros"
    PAST_DEADLINE = "past_deadline_ms"
    FINDINGS = "findings"
    TERMINAL = "terminal"
    TENANT = "tenant"
    OPERATION = "operation"
    ROUTE_PATH = "route_path"


COMPARE_DIMENSIONS: dict[str, str] = {
    "route": "route (any attempt's)",
    "release": "route release",
    "tenant": "tenant",
    "operation": "operation",
    "layer": "layer",
    "outcome_kind": "outcome kind",
    "http_status": "HTTP status",
    "retry_owner": "retry owner",
    "fallback_trigger": "what a fallback followed",
    "route_hop": "fallback hop (from → to, after what)",
    "attempt_ordinal": "attempt ordinal",
    "deadline_left": "least deadline left at dispatch",
    "terminal": "terminal",
    "entry_route": "entry route",
}
"""The dimensions a request takes values in (``compare_values_memo.sql``), with their
labels: what a comparison ranks, a breakdown groups by and an explorer query may require
(``where_dimension``/``where_value``)."""


@dataclass(frozen=True, slots=True)
class RequestQuery:
    """Which requests of the scope the Requests explorer lists (None: any) and in which
    order: ``terminal``; a finding ``rule`` they have; a ``layer`` that retried; at least
    ``min_receiver_attempts`` receiver attempts; with(out) sends beyond one per distinct
    operation (``retried``: a retry or resend at any layer), a fallback, a missed deadline,
    nested retries (≥ 2 layers retried), wasted cost, a violation (an error or warning
    finding); taking ``where_value`` in ``where_dimension`` (one of
    :data:`COMPARE_DIMENSIONS`; an attempt-level one: any of its attempts); sorted by
    ``sort``, at most ``limit`` rows."""

    terminal: str | None = None
    rule: str | None = None
    layer: str | None = None
    min_receiver_attempts: int | None = None
    retried: bool | None = None
    fallback: bool | None = None
    deadline_missed: bool | None = None
    nested: bool | None = None
    wasted: bool | None = None
    violations: bool | None = None
    sort: RequestSort = RequestSort.RECEIVER_ATTEMPTS
    descending: bool = True
    limit: int = 200
    where_dimension: str | None = None
    where_value: str | None = None

    def __post_init__(self) -> None:
        if self.where_dimension is not None and self.where_dimension not in COMPARE_DIMENSIONS:
            raise ValueError(
                f"no dimension {self.where_dimension!r} "
                f"(dimensions: {', '.join(COMPARE_DIMENSIONS)})"
            )
        if (self.where_dimension is None) != (self.where_value is None):
            raise ValueError("where_dimension and where_value go together")
        if self.rule is not None and self.rule not in RULES_BY_ID:
            raise ValueError(f"unknown rule {self.rule!r}")
        if self.min_receiver_attempts is not None and self.min_receiver_attempts < 0:
            raise ValueError("min_receiver_attempts must not be negative")
        if not 1 <= self.limit <= 100_000:
            raise ValueError(f"limit must be within [1, 100000], got {self.limit}")
        RequestSort(self.sort)  # a value outside the enum is named here

    def params(self) -> dict[str, object]:
        """The bound parameters of ``request_list.sql`` / ``request_list_count.sql``."""
        return {
            "terminal": self.terminal,
            "rule": self.rule,
            "layer": self.layer,
            "min_receiver_attempts": self.min_receiver_attempts,
            "retried": self.retried,
            "fallback": self.fallback,
            "deadline_missed": self.deadline_missed,
            "nested": self.nested,
            "wasted": self.wasted,
            "violations": self.violations,
            "where_dimension": self.where_dimension,
            "where_value": self.where_value,
        }


_COMPARE_VALUES_MEMO = "compare_values_memo"
"""The memo of the values each request takes (``sql/lookups/compare_values_memo.sql``)."""


def ensure_request_rows(
    model: AuditModel, thresholds: Thresholds, query: RequestQuery | None = None
) -> None:
    """Build ``memo_request_rows`` for the current scope and ``thresholds`` unless it is
    there (one pass over the scope's requests, attempts and findings; every explorer page
    of that scope then reads it), and the values its requests take per dimension
    (:func:`ensure_compare_values`) when ``query`` requires one."""
    params = finding_params(thresholds)
    if ensure_memo(model, "request_rows_memo", params, lambda: install(model, thresholds)):
        # a table macro binds its table when created
        model.con.execute(load("request_rows_matching"))
        # the values' table holds these rows' figures for a breakdown: rebuilt with them
        model.scope.memos.pop(_COMPARE_VALUES_MEMO, None)
    if query is not None and query.where_dimension is not None:
        ensure_compare_values(model)


def ensure_compare_values(model: AuditModel) -> None:
    """Build ``memo_compare_totals`` and ``memo_compare_keys`` (every in-scope request's
    values per dimension of :data:`COMPARE_DIMENSIONS` as integer keys, with its explorer
    row's figures) for the current scope and explorer rows (:func:`ensure_request_rows`
    first) unless they are there."""
    ensure_memo(model, _COMPARE_VALUES_MEMO, {})


def request_list(
    model: AuditModel,
    query: RequestQuery = RequestQuery(),
    *,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[int, pa.Table]:
    """The logical requests of the scope ``query`` selects: how many, and the first
    ``query.limit`` of them in its order. Columns: id, trace, start, duration (ms),
    terminal, tenant, operation, entry route, route path, attempts (every layer), receiver
    attempts, distinct operations, excess attempts (receiver attempts beyond one per
    operation), retry amplification (receiver attempts ÷ operations, as the report's),
    retry product, retried layers, nested, fallback, deadline missed, late
    success, cost and wasted cost (micros, currency), how long past its deadline it ended
    and the cost of its attempts ending after it, findings, violations, rule ids."""
    con = model.scoped(filters)
    ensure_request_rows(model, thresholds, query)
    params = query.params()
    ((total,),) = con.execute(load("request_list_count"), params).fetchall()
    page = arrow(
        con,
        "request_list",
        {
            **params,
            "sort": RequestSort(query.sort).value,
            "descending": query.descending,
            "limit": query.limit,
        },
    )
    return int(total), page


def request_findings(
    model: AuditModel,
    logical_request_id: str,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """The findings of one logical request (rule id, severity, span, time, evidence), over
    the whole data set: whether its retries were synchronized with others' depends on
    them."""
    con = model.scoped(None)
    install(model, thresholds)
    return arrow(con, "request_findings", {"id": logical_request_id, **finding_params(thresholds)})


def request_span_tree(model: AuditModel, ident: str) -> pa.Table:
    """Every span of the logical requests ``ident`` names (request span, attempts and the
    spans beneath them) in tree order with its ``depth`` and number of ``children``, and
    what an investigator reads per span: status, error, HTTP, outcome, backoff,
    Retry-After, deadline, cost, GenAI model and tokens, events; the spans of no request
    in their traces too; and the critical path (``critical_ms``, ``critical_share``:
    critical_path.sql)."""
    with request_scope(model, ident) as cur:
        ids = [
            str(row["logical_request_id"])
            for row in arrow(cur, "request_summary", {"id": ident}).to_pylist()
        ]
        cur.execute(load("request_span_tree"), {"ids": ids})
        return arrow(cur, "critical_path")
