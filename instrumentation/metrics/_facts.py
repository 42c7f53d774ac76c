"""What one logical request's finished spans say, by the audit model's definitions.

The live instruments are computed from the same facts as the Parquet report: each rule
here is the one ``analytics/sql`` applies (named beside it), evaluated over the rows of
one request's attempt spans (each read as its span ends) when the request ends, instead
of over the data set. A test runs the
analytics' scenarios and the demo with both and requires the same figures.

* An attempt's outcome is its ``retryscope.outcome`` or, on an HTTP client span marked as
  a transport attempt, the one its status gives (``STATUS_RULES``, as
  ``model_attempts.sql``); an attempt without a parent attempt gets the one its parent
  span is (``model_attempts.sql``, step 2).
* Retry groups are a request's attempts of one layer under one enclosing attempt and, for
  sends, of one operation (distinct calls are not retries of one another), ordered by
  ordinal then start; a retry is a later attempt of its group (not a hedge) after one that
  did not succeed (``model_requests.sql``, ``retry_effectiveness.sql``).
* The receiver saw the attempts with no attempt beneath them; of each operation's (an
  attempt that is no send: operation 1) all but the first (by start, then span id) are
  resends (``all_attempt_facts.is_repeat``). The request's distinct operations are the largest
  operation ordinal among them (``all_request_nesting.operations``): retry amplification
  divides sends by them.
* Nesting: each layer's largest retry group (hedges left out); the product over the layers
  where it exceeds one (``all_request_nesting``).
* Accepted: a success, decision complete (or none), not a cancelled hedge, in a request
  whose terminal is complete (or unknown) (``all_attempt_facts``).
* Fallback, boundary widening and late successes are ``request_facts.sql``'s.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode

from retryscope import vocabulary as v
from retryscope.instrumentation._http_classify import NO_RESPONSE_KIND, classify_status
from retryscope.instrumentation._sdk import ended_fields, finished_attributes
from retryscope.instrumentation.metrics._instruments import FallbackQuality
from retryscope.vocabulary import BOUNDARY_RANK, Decision, HedgeResult, Layer, Outcome, Terminal

_SEND_ORDER: Final = operator.attrgetter("start", "span_id")
"""The order the receiver saw sends in (``all_attempt_facts.is_repeat``)."""
_LAYER_RANK: Final = {layer.value: rank for rank, layer in enumerate(Layer)}
_UNKNOWN_LAYER_RANK: Final = len(_LAYER_RANK)
_BOUNDARY_RANK: Final = {b.value: rank for b, rank in BOUNDARY_RANK.items()}
_SUCCESS: Final = Outcome.SUCCESS.value
_COMPLETE: Final = Decision.COMPLETE.value
_CANCELLED: Final = HedgeResult.CANCELLED.value
_COMPLETE_TERMINAL: Final = Terminal.COMPLETE.value
_STOP_DEADLINE: Final = Terminal.STOP_DEADLINE.value
_HTTP_STATUSES: Final = (v.HTTP_STATUS_CODE.key, *v.HTTP_STATUS_CODE.aliases)
_IDEMPOTENCY_DIGEST: Final = v.IDEMPOTENCY_DIGEST.key


def _str(value: object) -> str | None:
    return value if type(value) is str else None


def _int(value: object) -> int | None:
    return value if type(value) is int else None


_FIELDS: Final = (
    # numbers and flags first: their types are checked (see _typed)
    ("ordinal", v.ATTEMPT_ORDINAL.key, int),
    ("parent_ordinal", v.PARENT_ATTEMPT_ORDINAL.key, int),
    ("is_fallback", v.FALLBACK.key, bool),
    ("backoff_ms", v.BACKOFF_DELAY_MS.key, int),
    ("retry_after_ms", v.RETRY_AFTER_MS.key, int),
    ("not_before", v.NOT_BEFORE.key, int),
    ("reserved", v.COST_RESERVED.key, int),
    ("actual", v.COST_ACTUAL.key, int),
    ("deadline", v.DEADLINE.key, int),
    ("remaining_ms", v.DEADLINE_REMAINING_MS.key, int),
    ("estimated", v.COST_ESTIMATED.key, bool),
    ("hedge_ordinal", v.HEDGE_ORDINAL.key, int),
    ("operation_ordinal", v.OPERATION_ORDINAL.key, int),
    # strings: another type is only ever compared with strings or bounded as a value
    ("layer", v.LAYER.key, str),
    ("parent_layer", v.PARENT_LAYER.key, str),
    ("route", v.ROUTE_ID.key, str),
    ("route_boundary", v.ROUTE_DATA_BOUNDARY.key, str),
    ("route_capability", v.ROUTE_CAPABILITY_DIGEST.key, str),
    ("route_behavior", v.ROUTE_BEHAVIOR_CLASS.key, str),
    ("currency", v.COST_CURRENCY.key, str),
    ("outcome", v.OUTCOME.key, str),
    ("kind", v.OUTCOME_KIND.key, str),
    ("decision", v.DECISION.key, str),
    ("retry_owner", v.RETRY_OWNER.key, str),
    ("hedge_result", v.HEDGE_RESULT.key, str),
    ("tenant", v.TENANT.key, str),
    ("operation", v.OPERATION.key, str),
    ("http_method", v.HTTP_METHOD.key, str),
    ("old_http_method", v.HTTP_METHOD.aliases[0], str),  # older HTTP semantic conventions
)
"""(row field, span attribute key, its type) of every attribute an attempt row reads: a
value of another type (``bool`` for an ``int`` too) reads as absent."""
_KEYS: Final = tuple(key for _, key, _ in _FIELDS)
_CHECKED: Final = sum(1 for _, _, kind in _FIELDS if kind is not str)
_TYPES: Final = tuple(kind for _, _, kind in _FIELDS[:_CHECKED])
_NONE: Final = type(None)
_EXTRA_FIELDS: Final = ("backoff_ms", "retry_after_ms", "not_before", "reserved", "actual")
"""The fields whose values make an attempt record more than its counts (adjacent above)."""
_NAMES: Final = [name for name, _, _ in _FIELDS]
_FIRST_EXTRA: Final = _NAMES.index(_EXTRA_FIELDS[0])
_SAMPLED: Final = slice(_FIRST_EXTRA, _FIRST_EXTRA + len(_EXTRA_FIELDS))
if tuple(_NAMES[_SAMPLED]) != _EXTRA_FIELDS:
    raise RuntimeError("the fields of _EXTRA_FIELDS must be adjacent in _FIELDS")
_NOTHING_SAMPLED: Final = [None] * (_SAMPLED.stop - _SAMPLED.start)
_signatures: set[tuple[type, ...]] = set()
"""Type signatures of the checked values already found to be of their fields' types."""
_MAX_SIGNATURES: Final = 4096


def _typed(values: list[Any]) -> list[Any]:
    """``values`` (of :data:`_KEYS`) with every number or flag not of its field's type (a
    ``bool`` for an ``int`` too) made None, as the Parquet columns hold them. Signatures that
    pass are remembered, so the check is usually one set lookup."""
    signature = tuple(map(type, values[:_CHECKED]))
    if signature in _signatures:
        return values
    clean = [
        value if kind is _NONE or kind is expected else None
        for value, kind, expected in zip(values, signature, _TYPES, strict=False)
    ]
    if clean == values[:_CHECKED]:
        if len(_signatures) < _MAX_SIGNATURES:
            _signatures.add(signature)
        return values
    return clean + values[_CHECKED:]


class AttemptRow:
    """One finished attempt span, as the model's ``attempt_rows`` holds it, and the facts
    :func:`request_facts` derives for it (build it with :func:`attempt_row`)."""

    __slots__ = (
        *(name for name, _, _ in _FIELDS),
        "accepted",
        "duration_ms",
        "end",
        "extra",
        "leaf",
        "parent_span_id",
        "resend",
        "retry",
        "context",
        "span_id",
        "start",
    )
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
    operation_ordinal: int | None
    """On a send: its operation under its parent attempt (1, 2, ...)."""
    hedge_result: str | None
    tenant: str | None
    operation: str | None
    http_method: str | None
    old_http_method: str | None
    context: SpanContext | None
    """The span's context when it records a sample (backoff, Retry-After: their exemplars
    point at it), else None."""
    span_id: int
    parent_span_id: int | None
    start: int
    end: int
    duration_ms: float
    extra: bool
    """It holds a cost, backoff, Retry-After or ``not_before``."""
    retry: bool
    """A retry after a failure in its group (what retry effectiveness counts)."""
    leaf: bool
    """No attempt beneath it: the receiver saw it."""
    resend: bool
    """A send the receiver saw after the request's first one."""
    accepted: bool

    def __init__(
        self,
        values: Sequence[Any],
        context: SpanContext | None,
        parent: SpanContext | None,
        start: int,
        end: int,
    ) -> None:
        (
            self.ordinal,
            self.parent_ordinal,
            self.is_fallback,
            self.backoff_ms,
            self.retry_after_ms,
            self.not_before,
            self.reserved,
            self.actual,
            self.deadline,
            self.remaining_ms,
            self.estimated,
            self.hedge_ordinal,
            self.operation_ordinal,
            self.layer,
            self.parent_layer,
            self.route,
            self.route_boundary,
            self.route_capability,
            self.route_behavior,
            self.currency,
            self.outcome,
            self.kind,
            self.decision,
            self.retry_owner,
            self.hedge_result,
            self.tenant,
            self.operation,
            self.http_method,
            self.old_http_method,
        ) = values
        self.start, self.end = start, end
        self.duration_ms = (end - start) / 1e6
        self.extra = values[_SAMPLED] != _NOTHING_SAMPLED
        self.span_id = context.span_id if context is not None else 0
        # held only where a sample points at it: a row holds no other tracked object
        self.context = (
            context if self.backoff_ms is not None or self.retry_after_ms is not None else None
        )
        self.parent_span_id = parent.span_id if parent is not None else None
        self.retry = self.resend = self.accepted = False
        self.leaf = True

    @property
    def hedge_cancelled(self) -> bool:
        return self.hedge_result == _CANCELLED

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


def attempt_row(span: ReadableSpan, attrs: Mapping[str, Any]) -> AttemptRow:
    """The row of a finished span whose role is ``attempt`` (``attrs``: its attributes, as
    :func:`~retryscope.instrumentation._sdk.finished_attributes` reads them): built when
    the span ends, from what it holds then, so the span itself is not kept."""
    values = list(map(attrs.get, _KEYS))
    if tuple(map(type, values[:_CHECKED])) not in _signatures:
        values = _typed(values)
    context, parent, start, end, status = ended_fields(span)
    start = start or 0
    row = AttemptRow(values, context, parent, start, end or start)
    if row.outcome is None and (row.http_method is not None or row.old_http_method is not None):
        row.outcome, http_kind = _http_outcome(status, attrs)
        if row.kind is None:
            row.kind = http_kind
    return row


_NO_RESPONSE: Final = (NO_RESPONSE_KIND.family.value, NO_RESPONSE_KIND.value)
_BY_STATUS: dict[tuple[int, bool], tuple[str, str | None]] = {}
"""(family, kind) of the statuses seen so far, by (status, idempotent)."""
_MAX_STATUSES: Final = 4096


def _http_outcome(
    status_of_span: Status, attrs: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """(family, kind) of an HTTP send by its status (``rs_http_outcome``/``_kind``)."""
    status = None
    for name in _HTTP_STATUSES:  # (inline: once per send)
        status = attrs.get(name)
        if status is not None:
            break
    if type(status) is not int:
        status = None
    if status is None:
        if status_of_span.status_code is StatusCode.ERROR:
            return _NO_RESPONSE
        return None, None
    key = (status, attrs.get(_IDEMPOTENCY_DIGEST) is not None)
    known = _BY_STATUS.get(key)
    if known is None:
        kind = classify_status(status, idempotent=key[1])
        known = (_SUCCESS, None) if kind is None else (kind.family.value, kind.value)
        if len(_BY_STATUS) < _MAX_STATUSES:
            _BY_STATUS[key] = known
    return known


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
    operations: int = 0
    """Distinct operations: the largest operation ordinal among the receiver's sends."""
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


def _nest(rows: Sequence[AttemptRow], orphans: Sequence[AttemptRow]) -> bool:
    """An attempt that names no enclosing attempt takes its parent span's, when that is an
    attempt of the request (``model_attempts.sql``, step 2); ``orphans`` are the rows whose
    parent span may be one. True when some row took one."""
    by_span = {row.span_id: row for row in rows}
    nested = False
    for row in orphans:
        parent = by_span.get(row.parent_span_id)  # type: ignore[arg-type]
        if parent is not None:
            row.parent_layer, row.parent_ordinal = parent.layer, parent.ordinal
            nested = True
    return nested


def _group_order(row: AttemptRow) -> tuple[bool, int, int]:
    """Order within a retry group: by ordinal (absent last), then start."""
    return (row.ordinal is None, row.ordinal or 0, row.start)


_ORDINAL: Final = operator.attrgetter("ordinal")
_ORDINAL_START: Final = operator.attrgetter("ordinal", "start")
""":func:`_group_order` of a group whose ordinals are all set (read in C)."""
_GroupKey = tuple[str | None, str | None, int | None, int | None]


class _Walk:
    """The request's attempts in arrival order (one pass): retry groups, the rows whose
    parent span may be an attempt, the entry attempt (the first top-level one by start) and
    the attempts on a fallback route."""

    __slots__ = ("entry", "fallbacks", "groups", "orphans")

    def __init__(self, rows: Sequence[AttemptRow], request_span_id: int | None) -> None:
        groups: dict[_GroupKey, list[AttemptRow]] = {}
        orphans: list[AttemptRow] = []
        fallbacks: list[AttemptRow] = []
        entry: AttemptRow | None = None
        for row in rows:
            key = (row.layer, row.parent_layer, row.parent_ordinal, row.operation_ordinal)
            group = groups.get(key)
            if group is None:
                groups[key] = [row]
            else:
                group.append(row)
            if row.parent_layer is None:
                parent = row.parent_span_id
                if parent is not None and parent != request_span_id:
                    orphans.append(row)
                if entry is None or row.start < entry.start:
                    entry = row
            if row.is_fallback:
                fallbacks.append(row)
        self.groups, self.orphans, self.fallbacks, self.entry = groups, orphans, fallbacks, entry


def _mark_resends(leaves: list[AttemptRow]) -> int:
    """Mark every send after its operation's first as a resend; the distinct operations."""
    if len(leaves) > 1:
        leaves.sort(key=_SEND_ORDER)
    seen: set[int] = set()
    for row in leaves:
        operation = 1 if row.operation_ordinal is None else row.operation_ordinal
        if operation in seen:
            row.resend = True
        else:
            seen.add(operation)
    return max(seen, default=0)


def request_facts(rows: Sequence[AttemptRow], request: ReadableSpan | None) -> RequestFacts:
    """The facts of one request: its attempt rows (this process's) and its span, when the
    request itself ended here."""
    attrs: Mapping[str, Any] = {}
    request_span_id = None
    if request is not None:
        attrs = finished_attributes(request) or {}
        context = request.context
        request_span_id = context.span_id if context is not None else None
    walk = _Walk(rows, request_span_id)
    if walk.orphans and _nest(rows, walk.orphans):
        walk = _Walk(rows, request_span_id)  # the groups again, with the parents taken
    terminal = _str(attrs.get(v.TERMINAL.key))
    request_complete = terminal is None or terminal == _COMPLETE_TERMINAL
    deadline = _int(attrs.get(v.DEADLINE.key))
    groups = walk.groups
    parents = {(key[1], key[2]) for key in groups if key[1] is not None}
    parent_layers = {layer for layer, _ in parents}
    largest: dict[str | None, int] = {}
    leaves: list[AttemptRow] = []
    late_success = False
    # one pass in group order: leaves, retries (the group sizes), acceptance, late successes
    for (layer, _, _, _), group in groups.items():
        if len(group) > 1:
            group.sort(key=_group_order if None in map(_ORDINAL, group) else _ORDINAL_START)
        marks = layer in parent_layers  # some attempt of this layer may have one beneath it
        previous_failed = False
        size = 0
        for row in group:
            if marks:
                row.leaf = (layer, row.ordinal) not in parents
            if row.leaf:
                leaves.append(row)
            if not row.hedge_ordinal:
                size += 1
                if previous_failed:
                    row.retry = True
            if row.outcome == _SUCCESS:
                previous_failed = False
                row.accepted = (
                    request_complete
                    and (row.decision is None or row.decision == _COMPLETE)
                    and row.hedge_result != _CANCELLED
                )
                if not late_success:
                    limit = row.deadline if row.deadline is not None else deadline
                    late_success = limit is not None and row.end > limit
            else:
                previous_failed = True
        if size > largest.get(layer, 0):
            largest[layer] = size
    retried = [n for n in largest.values() if n > 1]
    nested_product = math.prod(retried) if len(retried) >= 2 else None
    operations = _mark_resends(leaves)
    if request is None:
        first = rows[0] if rows else None
        return RequestFacts(
            tuple(rows),
            has_request_span=False,
            tenant=first.tenant if first is not None else None,
            operation=first.operation if first is not None else None,
        )
    return RequestFacts(
        tuple(rows),
        has_request_span=True,
        tenant=_str(attrs.get(v.TENANT.key)),
        operation=_str(attrs.get(v.OPERATION.key)),
        terminal=terminal,
        retry_owner=_str(attrs.get(v.RETRY_OWNER.key)),
        receiver=len(leaves),
        operations=operations,
        nested_product=nested_product,
        **_fallback_facts(rows, attrs, walk.entry, walk.fallbacks),
        late_success=late_success,
        deadline_exhausted=terminal == _STOP_DEADLINE,
    )


def _fallback_facts(
    rows: Sequence[AttemptRow],
    attrs: Mapping[str, Any],
    entry: AttemptRow | None,
    fallbacks: Sequence[AttemptRow],
) -> dict[str, Any]:
    """``fallback`` and ``widened_by`` of :class:`RequestFacts` (``request_facts.sql``);
    ``entry`` is the request's first top-level attempt, ``fallbacks`` its attempts on a
    fallback route."""
    allowed = _str(attrs.get(v.MAX_DATA_BOUNDARY.key))
    if allowed is None and entry is not None:
        allowed = entry.route_boundary
    widened = (
        [r for r in rows if r.accepted and _within(r.route_boundary, allowed) is False]
        if allowed in _BOUNDARY_RANK
        else []  # no boundary to widen beyond
    )
    facts: dict[str, Any] = {"widened_by": min(widened, key=_layer_rank) if widened else None}
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
