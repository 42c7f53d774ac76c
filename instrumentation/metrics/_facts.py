"""What one logical request's finished spans say, by the audit model's definitions.

The live instruments are computed from the same facts as the Parquet report: each rule
here is the one ``analytics/sql`` applies (named beside it), evaluated over one request's
attempt spans when the request ends, instead of over the data set. A test runs the
analytics' scenarios and the demo with both and requires the same figures.

* An attempt's outcome is its ``retryscope.outcome`` or, on an HTTP client span marked as
  a transport attempt, the one its status gives (``STATUS_RULES``, as
  ``model_attempts.sql``); an attempt without a parent attempt gets the one its parent
  span is (``model_attempts.sql``, step 2).
* Retry groups are a request's attempts of one layer under one enclosing attempt, ordered
  by ordinal then start; a retry is a later attempt of its group (not a hedge) after one
  that did not succeed (``model_requests.sql``, ``retry_effectiveness.sql``).
* The receiver saw the attempts with no attempt beneath them; all but the first (by
  start, then span id) are resends (``all_receiver_traffic``).
* Nesting: each layer's largest retry group (hedges left out); the product over the layers
  where it exceeds one (``all_request_nesting``).
* Accepted: a success, decision complete (or none), not a cancelled hedge, in a request
  whose terminal is complete (or unknown) (``all_attempt_facts``).
* Fallback, boundary widening and late successes are ``request_facts.sql``'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from retryscope import vocabulary as v
from retryscope.instrumentation._http_classify import NO_RESPONSE_KIND, classify_status
from retryscope.instrumentation._sdk import finished_attributes
from retryscope.instrumentation.metrics._instruments import FallbackQuality
from retryscope.vocabulary import BOUNDARY_RANK, Decision, HedgeResult, Layer, Outcome, Terminal

_LAYER_RANK: Final = {layer.value: rank for rank, layer in enumerate(Layer)}
_UNKNOWN_LAYER_RANK: Final = len(_LAYER_RANK)
_BOUNDARY_RANK: Final = {b.value: rank for b, rank in BOUNDARY_RANK.items()}
_SUCCESS: Final = Outcome.SUCCESS.value
_COMPLETE: Final = Decision.COMPLETE.value
_CANCELLED: Final = HedgeResult.CANCELLED.value
_COMPLETE_TERMINAL: Final = Terminal.COMPLETE.value
_STOP_DEADLINE: Final = Terminal.STOP_DEADLINE.value
_HTTP_METHODS: Final = (v.HTTP_METHOD.key, *v.HTTP_METHOD.aliases)
_HTTP_STATUSES: Final = (v.HTTP_STATUS_CODE.key, *v.HTTP_STATUS_CODE.aliases)


def _str(value: object) -> str | None:
    return value if type(value) is str else None


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _bool(value: object) -> bool | None:
    return value if type(value) is bool else None


def _first(attrs: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


@dataclass(slots=True)
class AttemptRow:
    """One finished attempt span, as the model's ``attempt_rows`` holds it, and the facts
    :func:`request_facts` derives for it."""

    span_id: int
    parent_span_id: int | None
    start: int
    end: int
    layer: str | None
    ordinal: int | None
    parent_layer: str | None
    parent_ordinal: int | None
    route: str | None
    is_fallback: bool | None
    route_boundary: str | None
    route_capability: str | None
    route_behavior: str | None
    backoff_ms: int | None
    retry_after_ms: int | None
    not_before: int | None
    deadline: int | None
    remaining_ms: int | None
    reserved: int | None
    actual: int | None
    currency: str | None
    estimated: bool | None
    outcome: str | None
    kind: str | None
    decision: str | None
    retry_owner: str | None
    hedge_ordinal: int | None
    hedge_cancelled: bool
    span: ReadableSpan = field(repr=False)
    # derived by request_facts
    retry: bool = False
    """A retry after a failure in its group (what retry effectiveness counts)."""
    leaf: bool = True
    """No attempt beneath it: the receiver saw it."""
    resend: bool = False
    """A send the receiver saw after the request's first one."""
    accepted: bool = False

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start) / 1e6

    @property
    def cost_micros(self) -> int | None:
        """Actual cost, else the reservation; None when the attempt recorded neither."""
        return self.actual if self.actual is not None else self.reserved

    @property
    def cost_is_estimate(self) -> bool:
        return (self.actual is None and self.reserved is not None) or bool(self.estimated)

    @property
    def violates_not_before(self) -> bool:
        return self.not_before is not None and self.start < self.not_before


def attempt_row(span: ReadableSpan) -> AttemptRow:
    """The row of a finished span whose role is ``attempt``."""
    attrs = finished_attributes(span) or {}
    outcome, kind = _str(attrs.get(v.OUTCOME.key)), _str(attrs.get(v.OUTCOME_KIND.key))
    if _first(attrs, _HTTP_METHODS) is not None:
        http_outcome, http_kind = _http_outcome(span, attrs)
        if outcome is None:
            outcome = http_outcome
            if kind is None:
                kind = http_kind
    parent = span.parent
    context = span.context
    start = span.start_time or 0
    return AttemptRow(
        span_id=context.span_id if context is not None else 0,
        parent_span_id=parent.span_id if parent is not None else None,
        start=start,
        end=span.end_time or start,
        layer=_str(attrs.get(v.LAYER.key)),
        ordinal=_int(attrs.get(v.ATTEMPT_ORDINAL.key)),
        parent_layer=_str(attrs.get(v.PARENT_LAYER.key)),
        parent_ordinal=_int(attrs.get(v.PARENT_ATTEMPT_ORDINAL.key)),
        route=_str(attrs.get(v.ROUTE_ID.key)),
        is_fallback=_bool(attrs.get(v.FALLBACK.key)),
        route_boundary=_str(attrs.get(v.ROUTE_DATA_BOUNDARY.key)),
        route_capability=_str(attrs.get(v.ROUTE_CAPABILITY_DIGEST.key)),
        route_behavior=_str(attrs.get(v.ROUTE_BEHAVIOR_CLASS.key)),
        backoff_ms=_int(attrs.get(v.BACKOFF_DELAY_MS.key)),
        retry_after_ms=_int(attrs.get(v.RETRY_AFTER_MS.key)),
        not_before=_int(attrs.get(v.NOT_BEFORE.key)),
        deadline=_int(attrs.get(v.DEADLINE.key)),
        remaining_ms=_int(attrs.get(v.DEADLINE_REMAINING_MS.key)),
        reserved=_int(attrs.get(v.COST_RESERVED.key)),
        actual=_int(attrs.get(v.COST_ACTUAL.key)),
        currency=_str(attrs.get(v.COST_CURRENCY.key)),
        estimated=_bool(attrs.get(v.COST_ESTIMATED.key)),
        outcome=outcome,
        kind=kind,
        decision=_str(attrs.get(v.DECISION.key)),
        retry_owner=_str(attrs.get(v.RETRY_OWNER.key)),
        hedge_ordinal=_int(attrs.get(v.HEDGE_ORDINAL.key)),
        hedge_cancelled=attrs.get(v.HEDGE_RESULT.key) == _CANCELLED,
        span=span,
    )


def _http_outcome(span: ReadableSpan, attrs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(family, kind) of an HTTP send by its status (``rs_http_outcome``/``_kind``)."""
    status = _int(_first(attrs, _HTTP_STATUSES))
    idempotent = attrs.get(v.IDEMPOTENCY_DIGEST.key) is not None
    if status is None:
        if span.status.status_code is StatusCode.ERROR:
            return NO_RESPONSE_KIND.family.value, NO_RESPONSE_KIND.value
        return None, None
    kind = classify_status(status, idempotent=idempotent)
    return (_SUCCESS, None) if kind is None else (kind.family.value, kind.value)


@dataclass(frozen=True, slots=True)
class Fallback:
    """A request that dispatched to a fallback route."""

    from_route: str | None
    to_route: str | None
    success: bool
    quality: FallbackQuality | None
    """On a success only."""


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """One logical request's facts. Without its request span in this process (a
    continuation, or a request evicted while open) only the per-attempt facts hold."""

    attempts: tuple[AttemptRow, ...]
    has_request_span: bool
    tenant: str | None = None
    operation: str | None = None
    """The request's tenant and operation (from its span, else from its first attempt's)."""
    terminal: str | None = None
    retry_owner: str | None = None
    receiver: int = 0
    nested_product: int | None = None
    """The product of the retried layers' largest groups when two or more layers retried."""
    fallback: Fallback | None = None
    widened_by: AttemptRow | None = None
    """The accepted attempt beyond the allowed data boundary (outermost layer first)."""
    late_success: bool = False
    deadline_exhausted: bool = False


def _layer_rank(row: AttemptRow) -> int:
    return _LAYER_RANK.get(row.layer or "", _UNKNOWN_LAYER_RANK)


def _equal(a: str | None, b: str | None) -> bool | None:
    return None if a is None or b is None else a == b


def _within(boundary: str | None, allowed: str | None) -> bool | None:
    rank, limit = _BOUNDARY_RANK.get(boundary or ""), _BOUNDARY_RANK.get(allowed or "")
    return None if rank is None or limit is None else rank <= limit


def _quality(
    capability: bool | None, behavior: bool | None, boundary: bool | None
) -> FallbackQuality:
    if capability is None or behavior is None or boundary is None:
        return FallbackQuality.UNVERIFIED
    if capability and boundary:
        return FallbackQuality.BOUND if behavior else FallbackQuality.DEGRADED
    return FallbackQuality.MISMATCH


def _nest(rows: Sequence[AttemptRow]) -> None:
    """An attempt that names no enclosing attempt takes its parent span's, when that is an
    attempt of the request (``model_attempts.sql``, step 2)."""
    by_span = {row.span_id: row for row in rows}
    for row in rows:
        if row.parent_layer is None and row.parent_span_id is not None:
            parent = by_span.get(row.parent_span_id)
            if parent is not None:
                row.parent_layer, row.parent_ordinal = parent.layer, parent.ordinal


def _group(rows: Sequence[AttemptRow]) -> int | None:
    """Mark retries and leaves; the nested-retry product (two or more layers retried)."""
    groups: defaultdict[tuple[str | None, str | None, int | None], list[AttemptRow]]
    groups = defaultdict(list)
    parents = set()
    for row in rows:
        groups[row.layer, row.parent_layer, row.parent_ordinal].append(row)
        if row.parent_layer is not None:
            parents.add((row.parent_layer, row.parent_ordinal))
    largest: dict[str | None, int] = {}
    for (layer, _, _), group in groups.items():
        group.sort(key=lambda r: (r.ordinal is None, r.ordinal or 0, r.start))
        previous: AttemptRow | None = None
        for row in group:
            row.leaf = (row.layer, row.ordinal) not in parents
            row.retry = (
                previous is not None and not row.hedge_ordinal and previous.outcome != _SUCCESS
            )
            previous = row
        size = sum(1 for row in group if not row.hedge_ordinal)
        largest[layer] = max(largest.get(layer, 0), size)
    retried = [n for n in largest.values() if n > 1]
    return math.prod(retried) if len(retried) >= 2 else None


def request_facts(rows: Sequence[AttemptRow], request: ReadableSpan | None) -> RequestFacts:
    """The facts of one request: its attempt rows (this process's) and its span, when the
    request itself ended here."""
    _nest(rows)
    nested_product = _group(rows)
    leaves = sorted((r for r in rows if r.leaf), key=lambda r: (r.start, r.span_id))
    for row in leaves[1:]:
        row.resend = True
    attrs = (finished_attributes(request) or {}) if request is not None else {}
    terminal = _str(attrs.get(v.TERMINAL.key))
    request_complete = terminal is None or terminal == _COMPLETE_TERMINAL
    for row in rows:
        row.accepted = (
            row.outcome == _SUCCESS
            and (row.decision is None or row.decision == _COMPLETE)
            and not row.hedge_cancelled
            and request_complete
        )
    if request is None:
        first = (finished_attributes(rows[0].span) or {}) if rows else {}
        return RequestFacts(
            tuple(rows),
            has_request_span=False,
            tenant=_str(first.get(v.TENANT.key)),
            operation=_str(first.get(v.OPERATION.key)),
        )
    deadline = _int(attrs.get(v.DEADLINE.key))
    return RequestFacts(
        tuple(rows),
        has_request_span=True,
        tenant=_str(attrs.get(v.TENANT.key)),
        operation=_str(attrs.get(v.OPERATION.key)),
        terminal=terminal,
        retry_owner=_str(attrs.get(v.RETRY_OWNER.key)),
        receiver=len(leaves),
        nested_product=nested_product,
        **_fallback_facts(rows, attrs),
        late_success=any(
            row.outcome == _SUCCESS
            and (limit := row.deadline if row.deadline is not None else deadline) is not None
            and row.end > limit
            for row in rows
        ),
        deadline_exhausted=terminal == _STOP_DEADLINE,
    )


def _fallback_facts(rows: Sequence[AttemptRow], attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``fallback`` and ``widened_by`` of :class:`RequestFacts` (``request_facts.sql``)."""
    top = [r for r in rows if r.parent_layer is None]
    entry = min(top, key=lambda r: r.start) if top else None
    allowed = _str(attrs.get(v.MAX_DATA_BOUNDARY.key))
    if allowed is None and entry is not None:
        allowed = entry.route_boundary
    widened = [r for r in rows if r.accepted and _within(r.route_boundary, allowed) is False]
    facts: dict[str, Any] = {"widened_by": min(widened, key=_layer_rank) if widened else None}
    fallbacks = [r for r in rows if r.is_fallback]
    if not fallbacks:
        return facts
    answered = [r for r in fallbacks if r.accepted]
    if answered:
        chosen = min(answered, key=_layer_rank)
        quality: FallbackQuality | None = _quality(
            _equal(chosen.route_capability, _str(attrs.get(v.REQUIRED_CAPABILITY_DIGEST.key))),
            _equal(chosen.route_behavior, _str(attrs.get(v.REQUIRED_BEHAVIOR_CLASS.key))),
            _within(chosen.route_boundary, allowed),
        )
    else:
        outermost = min(_layer_rank(r) for r in fallbacks)
        chosen = max((r for r in fallbacks if _layer_rank(r) == outermost), key=lambda r: r.start)
        quality = None
    facts["fallback"] = Fallback(
        entry.route if entry is not None else None, chosen.route, bool(answered), quality
    )
    return facts
