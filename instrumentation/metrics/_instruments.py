"""The live instruments: one catalog of names, units, attributes and meanings.

Every instrument is derived from the retryscope attributes of finished spans by
:class:`~retryscope.instrumentation.metrics.AttemptMetricsProcessor`, with the definitions
of the audit model (``analytics/sql``), so on the same traffic each one equals a figure of
the Parquet report (:attr:`Instrument.report`). Names and units follow OpenTelemetry's
conventions (``retryscope.`` namespace, UCUM units, annotations in braces for counts);
attribute keys reuse the span attribute keys of :mod:`retryscope.vocabulary` where the
meaning is the same. The Grafana dashboard, the Prometheus rules and
``docs/reference/metrics.md`` name these instruments; a test checks them against this
catalog through :func:`prometheus_names`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from retryscope import vocabulary as v


class Kind(enum.StrEnum):
    """How an instrument aggregates: a monotonic sum, or a distribution."""

    COUNTER = "counter"
    HISTOGRAM = "histogram"


# Attribute keys of the instruments. Span keys where the meaning is the same ...
LAYER: Final = v.LAYER.key
ROUTE: Final = v.ROUTE_ID.key
OUTCOME: Final = v.OUTCOME.key
OUTCOME_KIND: Final = v.OUTCOME_KIND.key
RETRY_OWNER: Final = v.RETRY_OWNER.key
TERMINAL: Final = v.TERMINAL.key
CURRENCY: Final = v.COST_CURRENCY.key
ESTIMATED: Final = v.COST_ESTIMATED.key
DATA_BOUNDARY: Final = v.ROUTE_DATA_BOUNDARY.key
TENANT: Final = v.TENANT.key
OPERATION: Final = v.OPERATION.key
# ... and the metrics' own.
RETRY: Final = "retryscope.attempt.retry"
"""True on a retry: an attempt after a failed one in its retry group (same request, layer
and enclosing attempt); hedges are not retries."""
RESEND: Final = "retryscope.send.resend"
"""True on every send the receiver saw after the request's first one."""
WASTED: Final = "retryscope.cost.wasted"
"""True on the cost of an attempt whose result was not accepted."""
FROM_ROUTE: Final = "retryscope.fallback.from_route"
"""The route the request entered by (its first top-level attempt's)."""
TO_ROUTE: Final = "retryscope.fallback.to_route"
"""The fallback route that answered, or the last one tried when none did."""
FALLBACK_SUCCESS: Final = "retryscope.fallback.success"
"""True when a fallback attempt's answer was accepted."""
FALLBACK_QUALITY: Final = "retryscope.fallback.quality"
"""On a successful fallback (:class:`FallbackQuality`)."""

OVERFLOW: Final = "_other"
"""The value of a capped dimension (route, tenant, operation, currency) past its cap, and of
an enumerated one (layer, outcome, ...) that is not one of its values."""


class FallbackQuality(enum.StrEnum):
    """What a successful fallback's route binds, by the report's fallback-quality rules."""

    BOUND = "bound"
    """The request's capability contract and behavior class, within an allowed boundary."""
    DEGRADED = "degraded"
    """Capability and boundary hold; the behavior class differs."""
    UNVERIFIED = "unverified"
    """The data lacks a digest, class or boundary to check."""
    MISMATCH = "mismatch"
    """Another capability contract, or a data boundary wider than allowed."""


class Dimension(enum.StrEnum):
    """Optional attributes, added to every instrument only when configured (each capped)."""

    TENANT = "tenant"
    OPERATION = "operation"

    @property
    def key(self) -> str:
        return TENANT if self is Dimension.TENANT else OPERATION


ATTEMPTS_PER_REQUEST_BUCKETS: Final = (
    0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 15.0, 20.0, 27.0, 30.0,
    50.0, 100.0,
)  # fmt: skip
"""Every count up to 10 in a bucket of its own (the distribution is exact there)."""
DELAY_BUCKETS_MS: Final = (
    0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0,
    30_000.0, 60_000.0, 300_000.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Instrument:
    """One instrument: what it counts, when it is recorded, and the report figure it equals."""

    name: str
    kind: Kind
    unit: str
    description: str
    attributes: tuple[str, ...]
    report: str
    """The report figure (``retryscope report --format json`` key) or model query it equals."""
    buckets: tuple[float, ...] = ()
    """Explicit bucket boundaries of a histogram (advisory: a View may change them)."""


LOGICAL_REQUESTS: Final = Instrument(
    "retryscope.logical_requests",
    Kind.COUNTER,
    "{request}",
    "Logical requests ended, by terminal.",
    (TERMINAL, RETRY_OWNER),
    "`logical_requests`; by terminal `terminals`",
)
ATTEMPTS: Final = Instrument(
    "retryscope.attempts",
    Kind.COUNTER,
    "{attempt}",
    "Physical attempts of every layer (a harness attempt and the sends beneath it each count).",
    (LAYER, ROUTE, OUTCOME, OUTCOME_KIND, RETRY_OWNER, RETRY),
    "`physical_attempts`; by layer `amplification.by_layer[].physical_attempts`, by route "
    "`routes[].attempts`; retries `retry_effectiveness.by_kind[].retries`",
)
SENDS: Final = Instrument(
    "retryscope.sends",
    Kind.COUNTER,
    "{send}",
    "Attempts the receiver saw (those with no attempt beneath them); resends marked.",
    (LAYER, ROUTE, RETRY_OWNER, RESEND),
    "`receiver_attempts`; by layer `amplification.by_layer[].receiver_attempts`, by route "
    "`routes[].receiver_attempts`; resends: the retries of the load windows",
)
OPERATIONS: Final = Instrument(
    "retryscope.operations",
    Kind.COUNTER,
    "{operation}",
    "Distinct operations of the logical requests ended: per request, the most distinct "
    "operations (client calls, or distinct requests) any one attempt made. Sends per "
    "operation is retry amplification (1.0: no retry at any layer, however many calls).",
    (TERMINAL, RETRY_OWNER),
    "`operations`; `receiver_attempts` (`retryscope.sends`) ÷ it: `amplification_ratio`",
)
ATTEMPTS_PER_REQUEST: Final = Instrument(
    "retryscope.logical_request.attempts",
    Kind.HISTOGRAM,
    "{attempt}",
    "Physical attempts the receiver saw per logical request (sends per request), recorded "
    "when it ends: their distribution.",
    (TERMINAL, RETRY_OWNER),
    "count `logical_requests`, sum `receiver_attempts`, sum ÷ count `sends_per_request`, max "
    "`amplification.max_attempts_per_request`, p99 `amplification.p99_attempts_per_request`",
    ATTEMPTS_PER_REQUEST_BUCKETS,
)
NESTED_RETRY_PRODUCT: Final = Instrument(
    "retryscope.logical_request.nested_retry_product",
    Kind.HISTOGRAM,
    "{attempt}",
    "Per logical request where two or more layers retried: the product of each retried "
    "layer's largest retry group (3 harness tries x 3 SDK tries = 9).",
    (RETRY_OWNER,),
    "count `amplification.nested_retry_requests`, max `amplification.max_nested_multiplication`",
    ATTEMPTS_PER_REQUEST_BUCKETS,
)
BACKOFF_DELAY: Final = Instrument(
    "retryscope.backoff.delay",
    Kind.HISTOGRAM,
    "ms",
    "Delay scheduled before an attempt (after the previous one completed).",
    (LAYER, ROUTE),
    "`backoff_delay_ms` of the attempts (`retryscope request`)",
    DELAY_BUCKETS_MS,
)
RETRY_AFTER: Final = Instrument(
    "retryscope.backoff.retry_after",
    Kind.HISTOGRAM,
    "ms",
    "Bounded Retry-After hint the previous attempt received.",
    (LAYER, ROUTE),
    "`retry_after_ms` of the attempts (`retryscope request`)",
    DELAY_BUCKETS_MS,
)
NOT_BEFORE_VIOLATIONS: Final = Instrument(
    "retryscope.not_before.violations",
    Kind.COUNTER,
    "{attempt}",
    "Attempts started before their not_before (Retry-After or the backoff ignored).",
    (LAYER, ROUTE),
    "`violations.not_before_ignored`",
)
COST: Final = Instrument(
    "retryscope.cost",
    Kind.COUNTER,
    "{microunit}",
    "Cost of attempts in integer micro-units of the currency (the actual cost, else the "
    "reservation), recorded when the logical request ends; wasted when not accepted.",
    (CURRENCY, ROUTE, WASTED, ESTIMATED),
    "`cost.by_currency[].total_micros`; wasted `.wasted_micros`, estimated `.estimated_micros`",
)
DEADLINE_EXHAUSTED: Final = Instrument(
    "retryscope.deadline.exhausted",
    Kind.COUNTER,
    "{request}",
    "Logical requests stopped by their deadline (terminal stop_deadline).",
    (RETRY_OWNER,),
    "`deadline_exhausted`",
)
LATE_SUCCESSES: Final = Instrument(
    "retryscope.deadline.late_successes",
    Kind.COUNTER,
    "{request}",
    "Logical requests with an attempt that succeeded after the deadline.",
    (RETRY_OWNER,),
    "`deadline.late_successes`",
)
DOOMED_DISPATCHES: Final = Instrument(
    "retryscope.deadline.doomed_dispatches",
    Kind.COUNTER,
    "{attempt}",
    "Attempts dispatched with less time left than the median latency of their route and "
    "layer (over a window of recent attempts).",
    (LAYER, ROUTE),
    "`deadline.doomed_dispatches`",
)
FALLBACKS: Final = Instrument(
    "retryscope.fallbacks",
    Kind.COUNTER,
    "{request}",
    "Logical requests that dispatched to a fallback route, by entry and fallback route.",
    (FROM_ROUTE, TO_ROUTE, FALLBACK_SUCCESS, FALLBACK_QUALITY),
    "`requests_with_fallback`; success `fallback.fallback_successes`, quality bound "
    "`.quality_fallback_successes`, degraded `.degraded_fallbacks`, unverified "
    "`.unverified_fallbacks`",
)
BOUNDARY_WIDENED: Final = Instrument(
    "retryscope.data_boundary.widened",
    Kind.COUNTER,
    "{request}",
    "Logical requests whose accepted answer came from a route beyond the data boundary "
    "policy allows (or, without one, beyond the entry route's).",
    (ROUTE, DATA_BOUNDARY),
    "`fallback.boundary_widened_requests`",
)

INSTRUMENTS: Final[tuple[Instrument, ...]] = (
    LOGICAL_REQUESTS,
    ATTEMPTS,
    SENDS,
    OPERATIONS,
    ATTEMPTS_PER_REQUEST,
    NESTED_RETRY_PRODUCT,
    BACKOFF_DELAY,
    RETRY_AFTER,
    NOT_BEFORE_VIOLATIONS,
    COST,
    DEADLINE_EXHAUSTED,
    LATE_SUCCESSES,
    DOOMED_DISPATCHES,
    FALLBACKS,
    BOUNDARY_WIDENED,
)
"""Every instrument, in the order the reference lists them."""

_PROMETHEUS_UNITS: Final = {"ms": "milliseconds", "s": "seconds", "By": "bytes"}


def prometheus_name(instrument: Instrument) -> str:
    """The metric family name the OpenTelemetry Prometheus exporter gives ``instrument``:
    dots become underscores, a unit of UCUM letters becomes a suffix (an annotation in
    braces does not), and a counter ends in ``_total``."""
    name = instrument.name.replace(".", "_")
    unit = "" if instrument.unit.startswith("{") else instrument.unit
    if unit:
        name += "_" + _PROMETHEUS_UNITS.get(unit, unit)
    return name + "_total" if instrument.kind is Kind.COUNTER else name


def prometheus_names(instrument: Instrument) -> tuple[str, ...]:
    """Every series name a scrape holds for ``instrument`` (a histogram's bucket, sum and
    count)."""
    name = prometheus_name(instrument)
    if instrument.kind is Kind.HISTOGRAM:
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
    return (name,)


def prometheus_label(key: str) -> str:
    """The label an attribute key becomes in Prometheus (dots to underscores)."""
    return key.replace(".", "_")
