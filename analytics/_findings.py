"""Findings: every violation and anomaly as a row linked to its logical request.

:data:`RULES` is the rule catalog, the one place each rule's id, severity, meaning and
action are written (the findings reference is generated from it). The rows come from the
macro ``finding_rows`` of ``sql/findings/findings.sql``, which emits rule ids only: rule id,
logical request id, trace id, span id, time and evidence (a JSON object with the numbers
that triggered the rule); the listing adds each rule's severity from the catalog. The rules
of single attempts are judged when the model is built (``sql/model/model_findings.sql``,
the table ``attempt_findings``) and selected from there.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from retryscope.analytics._filters import Filters
from retryscope.analytics._metrics import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    ensure_load_windows,
    ensure_retry_clusters,
    load_params,
)
from retryscope.analytics._queries import arrow, load
from retryscope.analytics.replay._policy_drift import install_macro as install_drift_macro

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    meaning: str
    action: str


E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

RULES: tuple[Rule, ...] = (
    Rule(
        "not_before_ignored",
        E,
        "An attempt started before its not_before: Retry-After or the backoff was ignored.",
        "Make the scheduler wait until not_before; honour bounded Retry-After hints.",
    ),
    Rule(
        "retry_after_non_retryable",
        E,
        "A retry or fallback followed a non-retryable outcome (route shopping).",
        "Stop on non-retryable outcomes; fix the request or the classification instead.",
    ),
    Rule(
        "unreconciled_retry_after_indeterminate",
        E,
        "A retry or fallback followed an indeterminate outcome with no reconciliation "
        "recorded in between: the effect may now happen twice.",
        "Reconcile with the receiver (poll by idempotency key or request id) and record the "
        "result before any further attempt; otherwise stop as indeterminate.",
    ),
    Rule(
        "idempotency_digest_conflict",
        E,
        "One idempotency digest was used by logical requests with different request "
        "digests: the key was reused for a different request.",
        "Derive a new idempotency key whenever the prompt, context or contract changes.",
    ),
    Rule(
        "attempt_after_terminal",
        E,
        "An attempt started after its request's terminal, or after a complete/stop decision.",
        "Reject dispatch once a request is terminal; check for leaked background retries.",
    ),
    Rule(
        "missing_ordinals",
        W,
        "A layer's attempt ordinals of a request are not 1..n: attempts were not recorded.",
        "Check exporter drops and instrumentation coverage of that layer.",
    ),
    Rule(
        "missing_terminal",
        W,
        "A request has attempts but no logical request span or no terminal.",
        "Make sure every logical request is closed (its span ended) and exported.",
    ),
    Rule(
        "telemetry_gap",
        W,
        "The exporter recorded spans it lost in a time window.",
        "Size the export buffer and queue for the load; treat metrics of that window as "
        "lower bounds.",
    ),
    Rule(
        "telemetry_anomaly",
        W,
        "A span no correct writer produces: a trace/span id that is not 32/16 lowercase hex, "
        "an end before its start, or attempt ordinals of a layer out of dispatch order.",
        "Fix the writer (or the clock skew between processes); treat the request's metrics "
        "as unreliable until then.",
    ),
    Rule(
        "duplicate_span",
        W,
        "A span (trace id, span id) arrived more than once: at-least-once delivery, a file "
        "ingested twice, two sources holding the same spans. The figures count it once.",
        "Deduplicate at the source: one Collector path per span, each file ingested once; "
        "the evidence gives the number of copies.",
    ),
    Rule(
        "unjoined_span",
        W,
        "A span stamped by retryscope carries no logical request id, so no figure counts "
        "it: its span attribute count limit evicted the id (`request_id_evicted`), or its "
        "writer wrote none (`request_id_missing`). Counted in the report's `unjoined_rows`.",
        "Raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (or capture fewer attributes) so the id "
        "survives; fix a writer that stamps without one. Treat the figures as lower bounds.",
    ),
    Rule(
        "nested_retry_owners",
        W,
        "Two or more layers retried within one request: their attempts multiply "
        "(e.g. harness 3 x transport 3 = 9).",
        "Keep one retry owner: disable SDK retries (e.g. max_retries=0) or harness retries.",
    ),
    Rule(
        "opaque_retry_ownership",
        W,
        "A retry-owning layer runs over a lower layer that declares retries of its own.",
        "Set the lower layer's retries to 0 so the declared owner sees every attempt.",
    ),
    Rule(
        "fallback_boundary_widening",
        E,
        "A request was answered by a route beyond its allowed data boundary "
        "(e.g. a private request answered by an external provider).",
        "Remove the route from the request's fallback chain or raise the policy maximum "
        "deliberately; review the data that left the boundary.",
    ),
    Rule(
        "fallback_capability_mismatch",
        E,
        "A fallback answered with a route whose capability contract differs from the request's.",
        "Only list prevalidated routes binding the same capability digest.",
    ),
    Rule(
        "degraded_fallback",
        INFO,
        "A fallback answered with a route of another behavior class (degraded answer).",
        "Surface the degradation to the caller; allow it only where the product permits.",
    ),
    Rule(
        "late_success",
        W,
        "A request succeeded only at or after its deadline (once per request, on its outermost "
        "late success): work nobody could use.",
        "Pass the remaining deadline to the attempt as its timeout.",
    ),
    Rule(
        "deadline_exhausted",
        INFO,
        "A request was stopped by its deadline (terminal stop_deadline): the caller got no "
        "answer in time.",
        "See where the time went (slow attempts, backoff, Retry-After waits); pass the "
        "remaining deadline to each attempt and stop before an attempt that cannot finish.",
    ),
    Rule(
        "doomed_dispatch",
        INFO,
        "An attempt was dispatched with less time left than its route's median latency.",
        "Do not dispatch when the remaining time is below the route's typical latency.",
    ),
    Rule(
        "breaker_open_dispatch",
        W,
        "An attempt was dispatched to a route whose circuit breaker was open.",
        "Route around open breakers; check that the breaker state is consulted.",
    ),
    Rule(
        "synchronized_retries",
        W,
        "Retries of many requests started within a few ms of one another: missing jitter.",
        "Add (replayable) jitter to the backoff schedule.",
    ),
    Rule(
        "retry_budget_exceeded",
        W,
        "In a time window, repeats exceeded the retry budget share of receiver traffic and "
        f"its floor of {DEFAULT_THRESHOLDS.retry_budget_min_retries} repeats (after Envoy's "
        "`min_retry_concurrency`): a retry storm.",
        "Enforce a retry budget (e.g. 10 %) and shed retries when it is spent.",
    ),
    Rule(
        "policy_drift",
        W,
        "The retry owner's recorded attempts differ from what the request's own policy "
        "(side file `_policies/<policy_digest>.json`) planned: another route or release, "
        "another delay or not_before, an attempt past a budget, or another terminal.",
        "Check that the controller evaluating the policy is the only retry owner and that "
        "the deployed policy is the reviewed one; the evidence names the field and both "
        "numbers.",
    ),
)

RULE_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
"""Each rule of :data:`RULES` by its id."""


def finding_params(thresholds: Thresholds) -> dict[str, object]:
    """The bound parameters of ``finding_rows`` for ``thresholds``."""
    return {
        "gap_ms": thresholds.sync_gap_ms,
        "min_requests": thresholds.sync_min_requests,
        **load_params(thresholds),
    }


def install(model: AuditModel, thresholds: Thresholds) -> None:
    """Create ``finding_rows`` over the current scope and the catalog table
    ``finding_rules`` (rule id, severity). A table macro binds what it reads when it is
    created, so its inputs come first: the policy-drift macro, and the retry clusters and
    load windows for ``thresholds``."""
    install_drift_macro(model)
    ensure_retry_clusters(model, thresholds)
    ensure_load_windows(model, thresholds)
    model.con.execute(load("findings"))
    model.con.execute(
        "CREATE OR REPLACE TEMP TABLE finding_rules AS "
        "SELECT unnest($ids::VARCHAR[]) AS rule_id, unnest($severities::VARCHAR[]) AS severity",
        {"ids": list(RULE_IDS), "severities": [r.severity.value for r in RULES]},
    )


def findings(
    model: AuditModel,
    *,
    rule: str | None = None,
    rules: Collection[str] | None = None,
    limit: int | None = None,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> pa.Table:
    """All findings (or those of ``rule``, or of any of ``rules``), ordered by time; the
    first ``limit`` only when given (a UI lists a page of them, not millions)."""
    wanted = ([rule] if rule is not None else []) + list(rules or ())
    unknown = [r for r in wanted if r not in RULES_BY_ID]
    if unknown:
        raise ValueError(f"unknown rule {unknown[0]!r}; rules: {', '.join(RULE_IDS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    con = model.scoped(filters)
    install(model, thresholds)
    selected = wanted if rule is not None or rules is not None else None
    return arrow(
        con, "finding_list", {"rules": selected, "limit": limit, **finding_params(thresholds)}
    )


def finding_counts(
    model: AuditModel,
    *,
    filters: Filters | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, int]:
    """How many findings each rule has (every rule id, 0 when none), without building the
    rows: what a report needs on a data set with millions of findings."""
    con = model.scoped(filters)
    install(model, thresholds)
    counts = dict.fromkeys(RULE_IDS, 0)
    for row in arrow(con, "findings_counts", finding_params(thresholds)).to_pylist():
        counts[str(row["rule_id"])] = int(row["n"])
    return counts
