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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode

from retryscope import vocabulary as v
from retryscope.http_rules import NO_RESPONSE_KIND, classify_status
from retryscope.instrumentation._sdk_finished import Ended, finished_attributes
from retryscope.instrumentation.metrics._instruments import FallbackQuality
from retryscope.vocabulary import BOUNDARY_RANK, Decision, HedgeResult, Layer, Outcome, Terminal


def _plain_class(*flags: object, **settings: object) -> Callable[[type], type]:
    """``mypyc_attr`` where mypy's extensions are not installed: it only tells mypyc how to
    build a class, and plain Python builds it as written."""
    return lambda cls: cls


try:
    from mypy_extensions import mypyc_attr
except ImportError:  # (plain Python without mypy's extensions: the decorator only tells mypyc)
    mypyc_attr = _plain_class  # type: ignore[assignment]

_SEND_ORDER: Final = operator.attrgetter("start", "span_id")
"""The order the receiver saw sends in (``all_attempt_facts.is_repeat``)."""
_LAYER_RANK: Final[dict[str, int]] = {layer.value: rank for rank, layer in enumerate(Layer)}
_UNKNOWN_LAYER_RANK: Final = len(_LAYER_RANK)
_BOUNDARY_RANK: Final[dict[str, int]] = {b.value: rank for b, rank in BOUNDARY_RANK.items()}
_SUCCESS: Final[str] = Outcome.SUCCESS.value
_COMPLETE: Final[str] = Decision.COMPLETE.value
_CANCELLED: Final[str] = HedgeResult.CANCELLED.value
_COMPLETE_TERMINAL: Final[str] = Terminal.COMPLETE.value
_STOP_DEADLINE: Final[str] = Terminal.STOP_DEADLINE.value
_HTTP_STATUSES: Final[tuple[str, ...]] = (v.HTTP_STATUS_CODE.key, *v.HTTP_STATUS_CODE.aliases)
_IDEMPOTENCY_DIGEST: Final[str] = v.IDEMPOTENCY_DIGEST.key


def _str(value: object) -> str | None:
    return value if type(value) is str else None


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _same(a: object, b: object) -> bool:
    """``a == b``, the identical object first, as a dict compares its keys: a request's
    rows mostly share their values' objects, and an ``==`` between objects costs a
    comparison call even when they are one (this runs several times per attempt)."""
    return a is b or bool(a == b)


# The span attributes an attempt row reads (typed here, so a compiled build knows them
# without analysing the vocabulary). Numbers and flags of another type (a ``bool``
# for an ``int`` too) read as absent, as the Parquet columns hold them; strings are kept
# as they are (another type is only ever compared with strings or bounded as a value).
_ORDINAL_KEY: Final[str] = v.ATTEMPT_ORDINAL.key
_PARENT_ORDINAL_KEY: Final[str] = v.PARENT_ATTEMPT_ORDINAL.key
_FALLBACK_KEY: Final[str] = v.FALLBACK.key
_BACKOFF_KEY: Final[str] = v.BACKOFF_DELAY_MS.key
_RETRY_AFTER_KEY: Final[str] = v.RETRY_AFTER_MS.key
_NOT_BEFORE_KEY: Final[str] = v.NOT_BEFORE.key
_RESERVED_KEY: Final[str] = v.COST_RESERVED.key
_ACTUAL_KEY: Final[str] = v.COST_ACTUAL.key
_DEADLINE_KEY: Final[str] = v.DEADLINE.key
_REMAINING_KEY: Final[str] = v.DEADLINE_REMAINING_MS.key
_ESTIMATED_KEY: Final[str] = v.COST_ESTIMATED.key
_HEDGE_ORDINAL_KEY: Final[str] = v.HEDGE_ORDINAL.key
_OPERATION_ORDINAL_KEY: Final[str] = v.OPERATION_ORDINAL.key
_LAYER_KEY: Final[str] = v.LAYER.key
_PARENT_LAYER_KEY: Final[str] = v.PARENT_LAYER.key
_ROUTE_KEY: Final[str] = v.ROUTE_ID.key
_BOUNDARY_KEY: Final[str] = v.ROUTE_DATA_BOUNDARY.key
_CAPABILITY_KEY: Final[str] = v.ROUTE_CAPABILITY_DIGEST.key
_BEHAVIOR_KEY: Final[str] = v.ROUTE_BEHAVIOR_CLASS.key
_CURRENCY_KEY: Final[str] = v.COST_CURRENCY.key
_OUTCOME_KEY: Final[str] = v.OUTCOME.key
_KIND_KEY: Final[str] = v.OUTCOME_KIND.key
_DECISION_KEY: Final[str] = v.DECISION.key
_OWNER_KEY: Final[str] = v.RETRY_OWNER.key
_HEDGE_RESULT_KEY: Final[str] = v.HEDGE_RESULT.key
_TENANT_KEY: Final[str] = v.TENANT.key
_OPERATION_KEY: Final[str] = v.OPERATION.key
_METHOD_KEY: Final[str] = v.HTTP_METHOD.key
_OLD_METHOD_KEY: Final[str] = v.HTTP_METHOD.aliases[0]  # older HTTP semantic conventions


@mypyc_attr(acyclic=True)
class AttemptRow:
    """One finished attempt span, as the model's ``attempt_rows`` holds it, and the facts
    :func:`request_facts` derives for it (build it with :func:`attempt_row`).

    Every field is read when the span ends, so the row keeps no reference to the span's
    attributes (a request's rows are held until it ends: a few hundred bytes each, not the
    whole attribute mapping). The fields only some rules read are read where one will: the
    decision, hedge result and deadline of a success (acceptance, late success), the
    route's boundary on a success or a top-level attempt (boundary widening, the entry
    route), its capability and behaviour on a successful fallback (fallback quality), the
    currency and estimate of a cost.

    A row refers only to attribute values and the span's context, never back to a row, so
    the compiled class is ``acyclic``: the garbage collector does not track rows (a long
    request's thousands of rows are freed by reference counting, never walked)."""

    __slots__ = (
        "accepted",
        "actual",
        "backoff_ms",
        "context",
        "currency",
        "deadline",
        "decision",
        "duration_ms",
        "end",
        "estimated",
        "extra",
        "hedge_ordinal",
        "hedge_result",
        "is_fallback",
        "kind",
        "layer",
        "leaf",
        "not_before",
        "operation",
        "operation_ordinal",
        "ordinal",
        "outcome",
        "parent_layer",
        "parent_ordinal",
        "parent_span_id",
        "remaining_ms",
        "resend",
        "reserved",
        "retry",
        "retry_after_ms",
        "retry_owner",
        "route",
        "route_behavior",
        "route_boundary",
        "route_capability",
        "span_id",
        "start",
        "tenant",
    )
    ordinal: int | None
    parent_ordinal: int | None
    is_fallback: bool | None
    backoff_ms: int | None
    retry_after_ms: int | None
    not_before: int | None
    reserved: int | None
    actual: int | None
    remaining_ms: int | None
    hedge_ordinal: int | None
    operation_ordinal: int | None
    """On a send: its operation under its parent attempt (1, 2, ...)."""
    deadline: int | None
    estimated: bool | None
    layer: Any
    parent_layer: Any
    route: Any
    outcome: Any
    kind: Any
    retry_owner: Any
    tenant: Any
    operation: Any
    decision: Any
    hedge_result: Any
    route_boundary: Any
    route_capability: Any
    route_behavior: Any
    currency: Any
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
        attrs: dict[str, Any],
        context: SpanContext | None,
        span_id: int,
        parent_span_id: int | None,
        start: int,
        end: int,
        status: Status | None = None,
    ) -> None:
        # one read per field, no intermediate list, and the type checks written inline
        # (this runs for every attempt span that ends: a call per field measured +1-2 k
        # instructions per attempt compiled, +3.7 k as plain Python)
        value = attrs.get(_ORDINAL_KEY)
        self.ordinal = value if type(value) is int else None
        value = attrs.get(_PARENT_ORDINAL_KEY)
        self.parent_ordinal = value if type(value) is int else None
        value = attrs.get(_FALLBACK_KEY)
        self.is_fallback = value if type(value) is bool else None
        value = attrs.get(_BACKOFF_KEY)
        self.backoff_ms = value if type(value) is int else None
        value = attrs.get(_RETRY_AFTER_KEY)
        self.retry_after_ms = value if type(value) is int else None
        value = attrs.get(_NOT_BEFORE_KEY)
        self.not_before = value if type(value) is int else None
        value = attrs.get(_RESERVED_KEY)
        self.reserved = value if type(value) is int else None
        value = attrs.get(_ACTUAL_KEY)
        self.actual = value if type(value) is int else None
        value = attrs.get(_REMAINING_KEY)
        self.remaining_ms = value if type(value) is int else None
        value = attrs.get(_HEDGE_ORDINAL_KEY)
        self.hedge_ordinal = value if type(value) is int else None
        value = attrs.get(_OPERATION_ORDINAL_KEY)
        self.operation_ordinal = value if type(value) is int else None
        self.layer = attrs.get(_LAYER_KEY)
        self.parent_layer = attrs.get(_PARENT_LAYER_KEY)
        self.route = attrs.get(_ROUTE_KEY)
        self.outcome = attrs.get(_OUTCOME_KEY)
        self.kind = attrs.get(_KIND_KEY)
        self.retry_owner = attrs.get(_OWNER_KEY)
        self.tenant = attrs.get(_TENANT_KEY)
        self.operation = attrs.get(_OPERATION_KEY)
        if self.outcome is None:  # an HTTP send without one: its status says
            method = attrs.get(_METHOD_KEY)
            if method is None:
                method = attrs.get(_OLD_METHOD_KEY)
            if method is not None:
                self.outcome, http_kind = _http_outcome(status, attrs)
                if self.kind is None:
                    self.kind = http_kind
        succeeded = _same(self.outcome, _SUCCESS)
        self.decision = self.hedge_result = self.deadline = None
        self.route_boundary = self.route_capability = self.route_behavior = None
        if succeeded:
            self.decision = attrs.get(_DECISION_KEY)
            self.hedge_result = attrs.get(_HEDGE_RESULT_KEY)
            value = attrs.get(_DEADLINE_KEY)
            self.deadline = value if type(value) is int else None
            if self.is_fallback:
                self.route_capability = attrs.get(_CAPABILITY_KEY)
                self.route_behavior = attrs.get(_BEHAVIOR_KEY)
        if succeeded or self.parent_layer is None:
            self.route_boundary = attrs.get(_BOUNDARY_KEY)
        self.currency = self.estimated = None
        if self.reserved is not None or self.actual is not None:
            self.currency = attrs.get(_CURRENCY_KEY)
            value = attrs.get(_ESTIMATED_KEY)
            self.estimated = value if type(value) is bool else None
        self.start, self.end = start, end
        self.duration_ms = (end - start) / 1e6
        self.extra = (
            self.backoff_ms is not None
            or self.retry_after_ms is not None
            or self.not_before is not None
            or self.reserved is not None
            or self.actual is not None
        )
        self.span_id, self.parent_span_id = span_id, parent_span_id
        # held only where a sample points at it (fewer objects kept for the collector)
        self.context = (
            context if self.backoff_ms is not None or self.retry_after_ms is not None else None
        )
        self.retry = self.resend = self.accepted = False
        self.leaf = True

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


def attempt_row(attrs: dict[str, Any], ended: Ended) -> AttemptRow:
    """The row of a finished span whose role is ``attempt`` (``attrs``: its attributes, as
    :func:`~retryscope.instrumentation._sdk_finished.finished_attributes` reads them, as a
    ``dict``; ``ended``: the rest, as
    :func:`~retryscope.instrumentation._sdk_finished.ended_fields` does): built when the
    span ends, from what it holds then, so neither the span nor its attributes are kept."""
    start = ended[3] or 0
    end = ended[4]
    return AttemptRow(attrs, ended[0], ended[1], ended[2], start, end or start, ended[5])


_NO_RESPONSE: Final = (NO_RESPONSE_KIND.family.value, NO_RESPONSE_KIND.value)
_BY_STATUS: dict[int, tuple[str, str | None]] = {}
"""(family, kind) of the statuses seen so far, by ``2 * status + idempotent`` (an int key:
no tuple to build and hash for every send)."""
_MAX_STATUSES: Final = 4096


def _http_outcome(
    status_of_span: Status | None, attrs: dict[str, Any]
) -> tuple[str | None, str | None]:
    """(family, kind) of an HTTP send by its status (``rs_http_outcome``/``_kind``)."""
    found = None
    for name in _HTTP_STATUSES:  # (inline: once per send)
        found = attrs.get(name)
        if found is not None:
            break
    if type(found) is not int:
        if status_of_span is not None and status_of_span.status_code is StatusCode.ERROR:
            return _NO_RESPONSE
        return None, None
    status: int = found
    idempotent = attrs.get(_IDEMPOTENCY_DIGEST) is not None
    key = 2 * status + 1 if idempotent else 2 * status
    known = _BY_STATUS.get(key)
    if known is None:
        kind = classify_status(status, idempotent=idempotent)
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
_Enclosing = tuple[Any, Any, int | None]
"""A retry group's layer and enclosing attempt (its layer and ordinal)."""
_Group = AttemptRow | list[AttemptRow]
"""A retry group's attempts: the row itself while it is the only one (most sends are the
only attempt of their operation), a list from the second on."""


class _Walk:
    """The request's attempts in arrival order (one pass): retry groups, the rows whose
    parent span may be an attempt, the entry attempt (the first top-level one by start) and
    the attempts on a fallback route.

    ``groups`` holds the retry groups by layer and enclosing attempt, then by operation
    ordinal (None: no send). A group of one attempt is held as the row itself: an attempt
    whose distinct calls number in the thousands then costs no key tuple or list each
    (objects the collector would count and traverse while the request lasts)."""

    __slots__ = ("entry", "fallbacks", "groups", "orphans")

    def __init__(self, rows: Sequence[AttemptRow], request_span_id: int | None) -> None:
        groups: dict[_Enclosing, dict[int | None, _Group]] = {}
        orphans: list[AttemptRow] = []
        fallbacks: list[AttemptRow] = []
        entry: AttemptRow | None = None
        by_operation: dict[int | None, _Group] = {}
        group: list[AttemptRow] | None = None  # the run's group, once it is a list
        last: AttemptRow | None = None
        for row in rows:
            operation = row.operation_ordinal
            if (  # a group's attempts mostly end one after another: looked up once per run
                last is None
                or not _same(row.layer, last.layer)
                or not _same(row.parent_layer, last.parent_layer)
                or not _same(row.parent_ordinal, last.parent_ordinal)
            ):
                key = (row.layer, row.parent_layer, row.parent_ordinal)
                found_enclosing = groups.get(key)
                if found_enclosing is None:
                    found_enclosing = groups[key] = {}
                by_operation = found_enclosing
                new_run = True
            else:
                new_run = not _same(operation, last.operation_ordinal)
            if new_run:
                found = by_operation.get(operation)
                if found is None:
                    by_operation[operation] = row
                    group = None
                elif isinstance(found, list):
                    found.append(row)
                    group = found
                else:
                    group = by_operation[operation] = [found, row]
            elif group is not None:
                group.append(row)
            else:  # the run's group has held one row, the last
                assert last is not None
                group = by_operation[operation] = [last, row]
            last = row
            if row.parent_layer is None:
                parent = row.parent_span_id
                if parent is not None and parent != request_span_id:
                    orphans.append(row)
                if entry is None or row.start < entry.start:
                    entry = row
            if row.is_fallback:
                fallbacks.append(row)
        self.groups, self.orphans, self.fallbacks, self.entry = groups, orphans, fallbacks, entry


def _in_group_order(group: list[AttemptRow]) -> bool:
    """Whether a retry group already stands in :func:`_group_order` with every ordinal set
    (attempts that ended in the order they were numbered, the usual case: no sort)."""
    previous = group[0]
    if previous.ordinal is None:
        return False
    for row in group[1:]:
        ordinal = row.ordinal
        if ordinal is None or ordinal < previous.ordinal:
            return False
        if ordinal == previous.ordinal and row.start < previous.start:
            return False
        previous = row
    return True


def _in_send_order(rows: list[AttemptRow]) -> bool:
    """Whether ``rows`` already stand in :data:`_SEND_ORDER` (sends that ended in the order
    they started, the usual case: no sort)."""
    previous = rows[0]
    for row in rows[1:]:
        if row.start < previous.start or (
            row.start == previous.start and row.span_id < previous.span_id
        ):
            return False
        previous = row
    return True


def _mark_resends(leaves: list[AttemptRow]) -> int:
    """Mark every send after its operation's first as a resend; the distinct operations."""
    if len(leaves) > 1 and not _in_send_order(leaves):
        leaves.sort(key=_SEND_ORDER)
    seen: set[int] = set()
    last: int | None = None  # the send before's operation (repeats mostly follow it)
    for row in leaves:
        operation = 1 if row.operation_ordinal is None else row.operation_ordinal
        if (last is not None and operation == last) or operation in seen:
            row.resend = True
        else:
            seen.add(operation)
            last = operation
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
    parents: dict[Any, set[int | None]] = {}  # by layer: the ordinals named as a parent
    for _, parent_layer, parent_ordinal in groups:
        if parent_layer is not None:
            ordinals = parents.get(parent_layer)
            if ordinals is None:
                parents[parent_layer] = {parent_ordinal}
            else:
                ordinals.add(parent_ordinal)
    largest: dict[str | None, int] = {}
    leaves: list[AttemptRow] = []
    late_success = False
    single: list[AttemptRow] = []  # a group of one row, in the one list reused
    # one pass in group order: leaves, retries (the group sizes), acceptance, late successes
    for (layer, _, _), by_operation in groups.items():
        enclosing = parents.get(layer)  # some attempt of this layer may have one beneath it
        most = 0
        for found in by_operation.values():
            if isinstance(found, list):
                group = found
                if not _in_group_order(group):
                    group.sort(key=_group_order if None in map(_ORDINAL, group) else _ORDINAL_START)
            else:
                if single:
                    single[0] = found
                else:
                    single.append(found)
                group = single
            previous_failed = False
            size = 0
            for row in group:
                if enclosing is not None:
                    row.leaf = row.ordinal not in enclosing
                if row.leaf:
                    leaves.append(row)
                if not row.hedge_ordinal:
                    size += 1
                    if previous_failed:
                        row.retry = True
                if _same(row.outcome, _SUCCESS):
                    previous_failed = False
                    row.accepted = (
                        request_complete
                        and (row.decision is None or row.decision == _COMPLETE)
                        and (row.hedge_result is None or row.hedge_result != _CANCELLED)
                    )
                    if not late_success:
                        limit = row.deadline
                        if limit is None:
                            limit = deadline
                        late_success = limit is not None and row.end > limit
                else:
                    previous_failed = True
            if size > most:
                most = size
        if most > largest.get(layer, 0):
            largest[layer] = most
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


Place = tuple[Any, Any]
"""A layer and route as the spans hold them."""


@dataclass(slots=True)
class Tally:
    """One request's attempts counted per distinct set of values the instruments carry (see
    :func:`tally`); the processor bounds each set once and records it."""

    attempts: dict[tuple[Any, Any, Any, Any, Any, bool], int]
    """By layer, route, outcome, outcome kind, retry owner and retry."""
    sends: dict[tuple[Any, Any, Any, bool], int]
    """The receiver's, by layer, route, retry owner and resend."""
    durations: dict[Place, list[float]]
    """Each attempt's duration (ms) by layer and route, in the order of the rows."""
    remaining: dict[Place, list[int]]
    """The time left at dispatch (ms) of the attempts that had a deadline."""
    extra: list[AttemptRow]
    """The rows holding a cost, backoff, Retry-After or ``not_before``."""


def _counted_alike(a: AttemptRow, b: AttemptRow) -> bool:
    """Whether two rows fall in the same series of every count :class:`Tally` keeps."""
    return (
        _same(a.layer, b.layer)
        and _same(a.route, b.route)
        and _same(a.outcome, b.outcome)
        and _same(a.kind, b.kind)
        and _same(a.retry_owner, b.retry_owner)
        and a.retry is b.retry
        and a.leaf is b.leaf
        and a.resend is b.resend
    )


def tally(rows: Sequence[AttemptRow]) -> Tally:
    """Count the attempts of a request whose facts :func:`request_facts` derived. Rows are
    taken in runs of rows counted alike (a request's attempts mostly are), so a run costs
    one key per count, not one per row."""
    counted = Tally({}, {}, {}, {}, [])
    start, n = 0, len(rows)
    while start < n:
        first = rows[start]
        stop = start + 1
        while stop < n and _counted_alike(rows[stop], first):
            stop += 1
        run = stop - start
        tried = (
            first.layer,
            first.route,
            first.outcome,
            first.kind,
            first.retry_owner,
            first.retry,
        )
        counted.attempts[tried] = counted.attempts.get(tried, 0) + run
        if first.leaf:
            sent = (first.layer, first.route, first.retry_owner, first.resend)
            counted.sends[sent] = counted.sends.get(sent, 0) + run
        place = (first.layer, first.route)
        durations = counted.durations.get(place)
        if durations is None:
            durations = counted.durations[place] = []
        remaining = counted.remaining.get(place)
        for index in range(start, stop):
            row = rows[index]
            durations.append(row.duration_ms)
            if row.remaining_ms is not None:
                if remaining is None:
                    remaining = counted.remaining[place] = []
                remaining.append(row.remaining_ms)
            if row.extra:
                counted.extra.append(row)
        start = stop
    return counted
