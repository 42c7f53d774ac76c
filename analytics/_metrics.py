"""The audit metrics as Arrow tables, computed by DuckDB over the views of ``connect``.

Every function takes the :class:`~retryscope.analytics.AuditModel` of
:func:`retryscope.analytics.connect`, optional
:class:`~retryscope.analytics._filters.Filters` (which logical requests count) and, where a
metric can be sliced, a :class:`~retryscope.analytics._filters.Dimension`. Sliced tables have
a ``value`` column (the slice: a route id, tenant, ``2026-11-29T10:00:00Z`` time bucket,
or ``all`` overall). The SQL lives in ``analytics/sql/<stage>/<name>.sql``; the rule of each
figure is one macro of ``analytics/sql/model/macros.sql`` (docs/guides/analytics.md, "Where
each figure is defined").

A model binds one set of filters at a time: do not share it between threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from retryscope.analytics._filters import DEFAULT_BUCKET, Dimension, Filters
from retryscope.analytics._queries import arrow
from retryscope.analytics._queries import load as load_sql

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Tunable limits of the load, retry-effectiveness and synchronized-retry analyses."""

    retry_budget: float = 0.10
    """Allowed fraction of receiver attempts that are repeats, per load window."""
    retry_budget_min_retries: int = 3
    """Repeats a load window may hold whatever their fraction: a window exceeds the budget
    only when its repeats exceed ``max(retry_budget_min_retries, retry_budget × attempts)``.
    One request retried once is 50 % of a quiet window's traffic, and no storm. The anchor
    is Envoy's retry budget, which always allows ``min_retry_concurrency`` (default 3)
    retries whatever the ratio (Envoy counts retries in flight; here, per window)."""
    load_window_ms: int = 60_000
    """Width of a load window."""
    sync_gap_ms: int = 5
    """Retries of different requests closer than this belong to one cluster."""
    sync_min_requests: int = 5
    """A cluster of at least this many requests is a synchronized retry."""
    ineffective_min_samples: int = 20
    """Retry groups with fewer retries are not judged."""
    ineffective_max_success_rate: float = 0.05
    """Retries succeeding at most this often are candidates to remove."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.retry_budget <= 1.0:
            raise ValueError(f"retry_budget must be within [0, 1], got {self.retry_budget}")
        if not 0.0 <= self.ineffective_max_success_rate <= 1.0:
            raise ValueError("ineffective_max_success_rate must be within [0, 1]")
        if self.retry_budget_min_retries < 0:
            raise ValueError(
                f"retry_budget_min_retries must be >= 0, got {self.retry_budget_min_retries}"
            )
        for name in ("load_window_ms", "sync_gap_ms", "sync_min_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.ineffective_min_samples < 1:
            raise ValueError("ineffective_min_samples must be >= 1")


DEFAULT_THRESHOLDS = Thresholds()


class SlicedMetric(Protocol):
    """A metric that can be computed overall or per slice of a :class:`Dimension`."""

    def __call__(
        self,
        model: AuditModel,
        *,
        by: Dimension | str = Dimension.OVERALL,
        filters: Filters | None = None,
        bucket: timedelta = DEFAULT_BUCKET,
    ) -> pa.Table: ...


def kept_slice(
    model: AuditModel,
    name: str,
    by: Dimension | str,
    bucket: timedelta = DEFAULT_BUCKET,
) -> pa.Table | None:
    """The sliced metric ``name`` by ``by`` as computed for the model's current scope, or
    None when it was not (nothing is computed)."""
    return model.scope.slices.get((name, Dimension(by).value, bucket))


def _sliced(name: str, doc: str) -> SlicedMetric:
    """The metric of query ``sql/<name>.sql`` (which reads its slice from ``$dim``), kept
    per scope, slice and bucket width once computed: the report and the UI's pages ask
    for the same slices (amplification by route and by layer, the overall rows)."""

    def metric(
        model: AuditModel,
        *,
        by: Dimension | str = Dimension.OVERALL,
        filters: Filters | None = None,
        bucket: timedelta = DEFAULT_BUCKET,
    ) -> pa.Table:
        con = model.scoped(filters, bucket=bucket)
        dim = Dimension(by).value
        kept = model.scope.slices
        key = (name, dim, bucket)
        table = kept.get(key)
        if table is None:
            table = kept[key] = arrow(con, name, {"dim": dim})
        return table

    metric.__name__ = metric.__qualname__ = name
    metric.__doc__ = doc
    return metric


amplification = _sliced(
    "amplification",
    """Logical requests; physical, harness and receiver attempts (sends: attempts with no
    lower-layer attempt beneath them, ``rs_sends``); distinct operations (``rs_operations``);
    sends per request = sends ÷ logical requests; retry amplification = sends ÷ distinct
    operations (``rs_amplification``); excess attempts = sends beyond one per operation
    (``rs_resends``); hidden attempts = sends beyond one per operation per harness (or
    outermost) attempt; max and p99 sends per request; requests where ≥ 2 layers retried
    and the largest multiplication among them (``rs_nested``, ``rs_multiplication``).
    ``sql/metrics/amplification.sql`` over the macros of ``sql/model/macros.sql``.""",
)
cost = _sliced(
    "cost",
    """Cost per slice and currency (micro-units): total, accepted, cost amplification =
    total ÷ accepted, wasted, estimated vs measured (``rs_cost_micros``,
    ``rs_cost_is_estimate``, ``rs_has_cost``, ``rs_wasted_micros``: sql/model/macros.sql).""",
)
fallback = _sliced(
    "fallback",
    """Fallback rate, success rate, quality (capability, behavior class and boundary bound),
    degraded and unverified fallbacks, and requests answered across a wider boundary
    (``rs_fallback_*``: sql/model/macros.sql; per request: sql/scope/request_facts.sql).""",
)
deadline = _sliced(
    "deadline",
    """Deadline-exhausted requests (``stop_deadline``: ``rs_deadline_exhausted``), late
    successes (``rs_late_success``), misses (sql/scope/request_facts.sql), and doomed
    dispatches (less time left than the route's median attempt latency).""",
)
latency = _sliced("latency", """Logical latency p50/p95/p99 next to first-attempt latency (ms).""")
hedging = _sliced(
    "hedging",
    """Hedge rate and waste, dispatches to an open breaker, and requests whose retry owner
    runs over a lower layer that declares retries of its own (opaque ownership).""",
)


def wasted_cost(model: AuditModel, *, filters: Filters | None = None) -> pa.Table:
    """Cost of attempts whose result was not accepted (``rs_wasted_micros``), by route and
    outcome kind."""
    return arrow(model.scoped(filters), "wasted_cost")


retry_effectiveness = _sliced(
    "retry_effectiveness",
    """Success rate of the attempt after a failure, per layer and slice: rows with
    ``slice='after_kind'`` group by the preceding failure kind, ``slice='ordinal'`` by the
    retry's attempt ordinal.""",
)


def ineffective_retries(
    model: AuditModel,
    *,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """Retries that almost never succeed (candidates to remove), with what they cost."""
    return arrow(
        model.scoped(filters),
        "ineffective_retries",
        {
            "min_samples": thresholds.ineffective_min_samples,
            "max_success_rate": thresholds.ineffective_max_success_rate,
        },
    )


def load(
    model: AuditModel,
    *,
    by: Dimension | str = Dimension.OVERALL,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    bucket: timedelta = DEFAULT_BUCKET,
) -> pa.Table:
    """Retry fraction of receiver traffic per window (and slice) against the retry budget
    (``over_budget`` marks storm windows: repeats beyond the budget and beyond
    :attr:`Thresholds.retry_budget_min_retries`)."""
    con = model.scoped(filters, bucket=bucket)
    if Dimension(by) is Dimension.OVERALL:
        ensure_load_windows(model, thresholds)
        return arrow(con, "load_overall")
    return arrow(
        con,
        "load",
        {**load_params(thresholds), "dim": Dimension(by).value},
    )


def synchronized_retries(
    model: AuditModel,
    *,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """Clusters of retries from many requests within a few ms of one another."""
    con = model.scoped(filters)
    ensure_retry_clusters(model, thresholds)
    return arrow(con, "synchronized_retries")


def ensure_retry_clusters(model: AuditModel, thresholds: Thresholds) -> None:
    """Compute the current scope's retry clusters for ``thresholds`` into
    ``memo_retry_clusters`` unless they are there already (two whole-scope window passes
    over the repeats: the report and the findings both need them)."""
    gap, least = thresholds.sync_gap_ms, thresholds.sync_min_requests
    ensure_memo(model, "retry_clusters_memo", {"gap_ms": gap, "min_requests": least})


def ensure_load_windows(model: AuditModel, thresholds: Thresholds) -> None:
    """Compute the current scope's load windows (not sliced) for ``thresholds`` into
    ``memo_load_windows`` unless they are there already (a whole-scope pass over receiver
    traffic counting distinct requests per window: the report's load figures and the
    retry-budget findings both need them)."""
    ensure_memo(
        model,
        "load_windows_memo",
        load_params(thresholds),
    )


def load_params(thresholds: Thresholds) -> dict[str, object]:
    """The bound parameters of ``load_windows_by`` (scope.sql) for ``thresholds``, but
    the slice: the load window and what a window may hold before it exceeds the budget."""
    return {
        "window_ms": thresholds.load_window_ms,
        "budget": thresholds.retry_budget,
        "min_retries": thresholds.retry_budget_min_retries,
    }


def ensure_memo(
    model: AuditModel,
    query: str,
    params: dict[str, object],
    prepare: Callable[[], object] | None = None,
) -> bool:
    """Run ``query`` (which creates a memo table over the current scope) with ``params``
    unless it already ran for the model's current scope and these parameters (then
    ``prepare()`` first); whether it ran."""
    key = "|".join(f"{k}={v!r}" for k, v in sorted(params.items()))
    if model.scope.memos.get(query) == key:
        return False
    if prepare is not None:
        prepare()
    model.con.execute(load_sql(query), params)
    model.scope.memos[query] = key
    return True
