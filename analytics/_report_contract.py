"""The report JSON contract: every key of :func:`build_report`'s result, its JSON type and
what it means, in one place.

``tests/test_report_schema.py`` checks every report against it (no key missing or extra,
every value of its type) and ``docs/reference/report.md`` is generated from it. A path names
a leaf: ``a.b`` nested objects, ``a[].b`` the items of a list, ``<terminal>`` and
``<rule id>`` the keys of an object keyed by data. Types: ``int``, ``float``, ``str``,
``bool``; ``|null`` where the value may be missing. Counts are integers, ratios floats,
money integer micro-units of the currency, latencies float milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class ReportKey:
    """One leaf of the report: its path, JSON type(s) and meaning."""

    path: str
    type: str
    meaning: str


INT, FLOAT, STR, BOOL = "int", "float", "str", "bool"
MS: Final = "float|null"
STR_OR_NULL: Final = "str|null"

_RETRIES = "retries (attempts after the first of their retry group, hedges excluded)"

REPORT_KEYS: Final[tuple[ReportKey, ...]] = tuple(
    ReportKey(*entry)
    for entry in (
        ("report_version", INT, "Version of this contract (1)."),
        ("filters.since", STR_OR_NULL, "ISO-8601 lower bound on request start, or null."),
        ("filters.until", STR_OR_NULL, "ISO-8601 upper bound (exclusive), or null."),
        ("filters.route", STR_OR_NULL, "Route filter (requests with an attempt on it), or null."),
        ("filters.tenant", STR_OR_NULL, "Tenant filter, or null."),
        ("filters.operation", STR_OR_NULL, "Operation filter, or null."),
        ("logical_requests", INT, "Logical requests in scope."),
        (
            "implicit_requests",
            INT,
            "Of `logical_requests`, those no span named: in a trace (or the part of one) "
            "where the application opened no `logical_request`, the outermost logical "
            "operation above the sends (a GenAI or SDK call span, a SERVER span, else the "
            "root span), its sends the physical attempts (docs/guides/zero-code.md).",
        ),
        (
            "empty_reason",
            STR_OR_NULL,
            "Why `logical_requests` is 0 (no span files under the path; spans none of which "
            "is in a logical request, and the likely cause; filters that select none), or "
            "null when it is not.",
        ),
        (
            "physical_attempts",
            INT,
            "Attempts at every layer, classified HTTP sends included.",
        ),
        (
            "receiver_attempts",
            INT,
            "Attempts with no lower-layer attempt beneath them: what the receivers saw.",
        ),
        (
            "operations",
            INT,
            "Distinct operations, summed over requests: per request the most distinct "
            "operations (client calls, or distinct requests) any one attempt made; a resend "
            "of the same request or a client's own retry is no new operation.",
        ),
        (
            "sends_per_request",
            FLOAT,
            "`receiver_attempts` ÷ `logical_requests`: physical sends per logical request.",
        ),
        (
            "amplification_ratio",
            FLOAT,
            "Retry amplification: `receiver_attempts` ÷ `operations`, sends per distinct "
            "operation (1.0: no retry at any layer, however many distinct calls).",
        ),
        ("completed", INT, "Requests with terminal `complete`."),
        (
            "requests_with_fallback",
            INT,
            "Requests with at least one attempt on a non-primary route.",
        ),
        ("fallback_rate", FLOAT, "`requests_with_fallback` ÷ `logical_requests`."),
        ("deadline_exhausted", INT, "Requests with terminal `stop_deadline`."),
        ("deadline_exhausted_rate", FLOAT, "`deadline_exhausted` ÷ `logical_requests`."),
        (
            "terminals.<terminal>",
            INT,
            "Requests per terminal (`unknown` when none was recorded).",
        ),
        ("routes[].route_id", STR, "Route (ordered by priority, then id)."),
        ("routes[].attempts", INT, "Its attempts, all layers."),
        (
            "routes[].receiver_attempts",
            INT,
            "Its attempts with no lower-layer attempt beneath them.",
        ),
        ("routes[].logical_requests", INT, "Requests that made an attempt on it."),
        (
            "routes[].sends_per_request",
            FLOAT,
            "`receiver_attempts` ÷ `logical_requests` on the route.",
        ),
        (
            "routes[].amplification_ratio",
            FLOAT,
            "Its receiver attempts ÷ the distinct operations they served (as the overall figure).",
        ),
        ("routes[].success_rate", FLOAT, "Successful attempts ÷ attempts."),
        ("routes[].is_fallback", BOOL, "Whether the route served as a fallback."),
        ("amplification.physical_attempts", INT, "As `physical_attempts`."),
        ("amplification.harness_attempts", INT, "Attempts at layer `harness`."),
        ("amplification.receiver_attempts", INT, "As `receiver_attempts`."),
        ("amplification.operations", INT, "As `operations`."),
        ("amplification.sends_per_request", FLOAT, "As `sends_per_request`."),
        ("amplification.amplification_ratio", FLOAT, "As `amplification_ratio`."),
        (
            "amplification.attempts_per_request",
            FLOAT,
            "`physical_attempts` ÷ `logical_requests` (every layer's attempts).",
        ),
        (
            "amplification.excess_attempts",
            INT,
            "Receiver attempts beyond one per distinct operation, per request, summed: the "
            "resends and retries the receivers saw (`receiver_attempts` − `operations`).",
        ),
        (
            "amplification.hidden_attempts",
            INT,
            "Receiver attempts beyond one per operation per harness attempt (the outermost "
            "layer's attempts where there is no harness layer), per request, summed: "
            "attempts the retry owner never saw.",
        ),
        (
            "amplification.max_attempts_per_request",
            INT,
            "Most receiver attempts of one request.",
        ),
        (
            "amplification.p99_attempts_per_request",
            INT,
            "99th percentile (discrete) of receiver attempts per request.",
        ),
        (
            "amplification.nested_retry_requests",
            INT,
            "Requests in which two or more layers retried.",
        ),
        (
            "amplification.max_nested_multiplication",
            INT,
            "Largest product of per-layer retry group sizes among them (3 × 3 = 9).",
        ),
        ("amplification.by_layer[].layer", STR, "Layer."),
        (
            "amplification.by_layer[].logical_requests",
            INT,
            "Requests with an attempt at that layer.",
        ),
        ("amplification.by_layer[].physical_attempts", INT, "Attempts at that layer."),
        ("amplification.by_layer[].receiver_attempts", INT, "Of which receiver attempts."),
        (
            "amplification.by_layer[].operations",
            INT,
            "Distinct operations among its receiver attempts, summed over requests.",
        ),
        (
            "amplification.by_layer[].sends_per_request",
            FLOAT,
            "Receiver attempts at that layer ÷ its requests.",
        ),
        (
            "amplification.by_layer[].amplification_ratio",
            FLOAT,
            "Receiver attempts at that layer ÷ their distinct operations.",
        ),
        (
            "amplification.by_layer[].attempts_per_request",
            FLOAT,
            "Attempts at that layer ÷ its requests (the layer's own multiplication; a "
            "harness's attempts all have sends beneath them, so its receiver ratio is 0).",
        ),
        (
            "amplification.by_layer[].excess_attempts",
            INT,
            "Attempts at that layer beyond the first of their retry group: its retries and hedges.",
        ),
        (
            "amplification.by_layer[].max_attempts_per_request",
            INT,
            "Most receiver attempts at that layer in one request.",
        ),
        (
            "amplification.by_layer[].p99_attempts_per_request",
            INT,
            "99th percentile of the same.",
        ),
        ("cost.by_currency[].currency", STR, "ISO 4217 code."),
        ("cost.by_currency[].total_micros", INT, "Cost of every attempt."),
        ("cost.by_currency[].accepted_micros", INT, "Cost of accepted attempts."),
        ("cost.by_currency[].cost_amplification", FLOAT, "`total_micros` ÷ `accepted_micros`."),
        ("cost.by_currency[].wasted_micros", INT, "`total_micros` − `accepted_micros`."),
        (
            "cost.by_currency[].estimated_micros",
            INT,
            "Cost taken from reservations (usage unknown).",
        ),
        ("cost.by_currency[].measured_micros", INT, "Cost from measured usage."),
        ("cost.by_currency[].estimated_attempts", INT, "Attempts whose cost is an estimate."),
        ("cost.by_currency[].measured_attempts", INT, "Attempts whose cost was measured."),
        ("cost.wasted[].route_id", STR, "Route of wasted attempts."),
        (
            "cost.wasted[].outcome_kind",
            STR,
            "Failure kind, or `success` for a success not accepted, or `hedge_cancelled`.",
        ),
        ("cost.wasted[].currency", STR, "ISO 4217 code."),
        ("cost.wasted[].attempts", INT, "Wasted attempts of that route, kind and currency."),
        ("cost.wasted[].wasted_micros", INT, "What they cost."),
        ("retry_effectiveness.by_kind[].layer", STR, "Layer of the retries."),
        (
            "retry_effectiveness.by_kind[].after_kind",
            STR,
            "Failure kind of the attempt they followed.",
        ),
        ("retry_effectiveness.by_kind[].retries", INT, f"Number of {_RETRIES}."),
        ("retry_effectiveness.by_kind[].successes", INT, "Of which succeeded."),
        ("retry_effectiveness.by_kind[].success_rate", FLOAT, "`successes` ÷ `retries`."),
        ("retry_effectiveness.by_ordinal[].layer", STR, "Layer of the retries."),
        ("retry_effectiveness.by_ordinal[].attempt_ordinal", INT, "Their attempt ordinal."),
        ("retry_effectiveness.by_ordinal[].retries", INT, f"Number of {_RETRIES}."),
        ("retry_effectiveness.by_ordinal[].successes", INT, "Of which succeeded."),
        ("retry_effectiveness.by_ordinal[].success_rate", FLOAT, "`successes` ÷ `retries`."),
        (
            "retry_effectiveness.ineffective[].layer",
            STR,
            "Retries that almost never succeed (candidates to remove): their layer.",
        ),
        ("retry_effectiveness.ineffective[].route_id", STR, "Their route."),
        (
            "retry_effectiveness.ineffective[].after_kind",
            STR,
            "The failure kind they followed.",
        ),
        ("retry_effectiveness.ineffective[].attempt_ordinal", INT, "Their attempt ordinal."),
        ("retry_effectiveness.ineffective[].retries", INT, "How many."),
        ("retry_effectiveness.ineffective[].successes", INT, "Of which succeeded."),
        ("retry_effectiveness.ineffective[].success_rate", FLOAT, "`successes` ÷ `retries`."),
        ("retry_effectiveness.ineffective[].cost_micros", INT, "What they cost."),
        ("fallback.requests_with_fallback", INT, "As `requests_with_fallback`."),
        ("fallback.fallback_rate", FLOAT, "As `fallback_rate`."),
        (
            "fallback.fallback_successes",
            INT,
            "Requests answered by an accepted fallback attempt.",
        ),
        (
            "fallback.fallback_success_rate",
            FLOAT,
            "`fallback_successes` ÷ `requests_with_fallback`.",
        ),
        (
            "fallback.quality_fallback_successes",
            INT,
            "Fallback successes whose route binds the request's capability digest and "
            "behavior class within the allowed data boundary.",
        ),
        (
            "fallback.fallback_quality",
            FLOAT,
            "`quality_fallback_successes` ÷ `fallback_successes`.",
        ),
        (
            "fallback.degraded_fallbacks",
            INT,
            "Fallback successes with another behavior class (capability and boundary hold).",
        ),
        (
            "fallback.unverified_fallbacks",
            INT,
            "Fallback successes the data cannot check (digest, class or boundary missing).",
        ),
        (
            "fallback.boundary_widened_requests",
            INT,
            "Requests answered by a route beyond the allowed boundary (the request's "
            "maximum, else its entry route's).",
        ),
        ("deadline.requests_with_deadline", INT, "Requests that carried a deadline."),
        ("deadline.deadline_exhausted", INT, "As `deadline_exhausted`."),
        ("deadline.deadline_exhausted_rate", FLOAT, "As `deadline_exhausted_rate`."),
        (
            "deadline.late_successes",
            INT,
            "Requests with a success that completed at or after the deadline.",
        ),
        (
            "deadline.deadline_misses",
            INT,
            "Requests stopped by, ended after, or succeeding after their deadline.",
        ),
        (
            "deadline.deadline_miss_rate",
            FLOAT,
            "`deadline_misses` ÷ `requests_with_deadline`.",
        ),
        (
            "deadline.doomed_dispatches",
            INT,
            "Attempts dispatched with less time left than their route's (and layer's) "
            "median attempt latency.",
        ),
        ("latency.logical_p50_ms", MS, "Median logical request latency."),
        ("latency.logical_p95_ms", MS, "95th percentile of logical request latency."),
        ("latency.logical_p99_ms", MS, "99th percentile of logical request latency."),
        (
            "latency.first_attempt_p50_ms",
            MS,
            "Median latency of each request's first outermost attempt.",
        ),
        ("latency.first_attempt_p95_ms", MS, "95th percentile of the same."),
        ("latency.first_attempt_p99_ms", MS, "99th percentile of the same."),
        (
            "latency.retry_tail_p99_ms",
            MS,
            "`logical_p99_ms` − `first_attempt_p99_ms`: the tail the retries add.",
        ),
        ("load.retry_budget", FLOAT, "The retry budget used (share of receiver traffic)."),
        (
            "load.retry_budget_min_retries",
            INT,
            "Repeats a window may hold whatever their share (Envoy's `min_retry_concurrency`).",
        ),
        ("load.window_ms", INT, "The window the budget is applied over."),
        ("load.windows", INT, "Windows with traffic."),
        (
            "load.storm_windows",
            INT,
            "Windows whose repeats exceeded the budget: more than "
            "`max(retry_budget_min_retries, retry_budget × attempts)`.",
        ),
        (
            "load.max_retry_fraction",
            FLOAT,
            "Highest share of repeats (retries, hedges, resends) in receiver traffic of any "
            "window.",
        ),
        (
            "load.synchronized_clusters",
            INT,
            "Clusters of retries from many requests within a few ms (missing jitter).",
        ),
        ("load.synchronized_requests", INT, "Requests in those clusters."),
        ("hedging.hedged_requests", INT, "Requests with a hedge."),
        ("hedging.hedge_rate", FLOAT, "`hedged_requests` ÷ `logical_requests`."),
        ("hedging.hedge_attempts", INT, "Hedges sent."),
        ("hedging.cancelled_attempts", INT, "Attempts cancelled as hedge losers."),
        ("hedging.hedge_waste_micros", INT, "Cost of cancelled hedge losers."),
        (
            "hedging.breaker_open_dispatches",
            INT,
            "Attempts dispatched to a route whose breaker was open.",
        ),
        (
            "hedging.opaque_ownership_requests",
            INT,
            "Requests whose retry owner ran over a lower layer declaring its own retries.",
        ),
        (
            "gateway.reporting_sends",
            INT,
            "Sends whose response carried a gateway's or proxy's count of its own tries "
            "(LiteLLM proxy, Portkey, Envoy headers): reported by the other side.",
        ),
        (
            "gateway.reported_attempts",
            INT,
            "Attempts those gateways report behind those responses (layer `gateway`): kept "
            "beside `receiver_attempts`, never added to it.",
        ),
        (
            "gateway.reported_retries",
            INT,
            "`gateway.reported_attempts` beyond one per reporting send: retries the gateways "
            "made that no send of this process shows.",
        ),
        (
            "digests.keyed_requests",
            INT,
            "Request spans (whole data set) whose digests are HMAC-SHA-256 under a deployment key.",
        ),
        (
            "digests.unkeyed_requests",
            INT,
            "Request spans (whole data set) whose digests are unkeyed SHA-256: a guessable "
            "idempotency key can be recovered from its digest.",
        ),
        (
            "digests.key_ids",
            INT,
            "Distinct deployment keys among them (more than 1: their digests do not join).",
        ),
        (
            "unjoined_rows.total",
            INT,
            "Rows (whole data set) the figures could not join to their logical request: "
            "the sum of the three below. Finding `unjoined_span` lists the first two.",
        ),
        (
            "unjoined_rows.request_id_evicted",
            INT,
            "Spans stamped by retryscope whose logical request id their span attribute count "
            "limit (`OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`) evicted (they lost attributes): no "
            "figure counts them.",
        ),
        (
            "unjoined_rows.request_id_missing",
            INT,
            "Spans carrying retryscope attributes (role, layer, ordinal, operation or route) "
            "but no logical request id, none lost to a limit: a foreign or broken writer's. "
            "No figure counts them.",
        ),
        (
            "unjoined_rows.request_span_missing",
            INT,
            "Attempts whose request id names no request span in the data set: counted in a "
            "request built from its attempts alone (no terminal, deadline or tenant; finding "
            "`missing_terminal`).",
        ),
        ("violations.<rule id>", INT, "Findings per rule (every rule listed, 0 when none)."),
        ("findings", INT, "Total findings."),
    )
)
"""Every leaf of the report, in report order."""

DYNAMIC_REPORT_KEYS: Final[dict[str, str]] = {
    "terminals": "terminals.<terminal>",
    "violations": "violations.<rule id>",
}
"""Objects keyed by data, and the path that stands for each of their keys."""
