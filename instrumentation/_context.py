"""The context API: one logical request, many physical attempts.

``logical_request(...)`` opens the logical request's span; ``req.attempt(...)`` opens one
child span per physical attempt and numbers it. Both put themselves into the
OpenTelemetry context under a private key (not Baggage, which propagators copy into
outgoing HTTP headers), held weakly (:class:`_Handle`: a scope the application can no
longer exit is collected, not kept by the contexts it left behind), so the
:class:`~retryscope.instrumentation._processor.AttemptStampingProcessor` can stamp every
span started beneath them, in this thread, in threads that copy the context, and in
asyncio tasks; :func:`current_scope` reads them as a :class:`Scope`. An attempt builds
its stamp and ``Scope`` only when first asked (most attempts have no foreign span beneath
them), so opening one costs the span, the ordinal allocation and the context switch.

Times come from an injectable ``clock`` (unix ns) so simulations and tests are exact.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope._fork import at_fork
from retryscope.instrumentation._classify import (
    Answer,
    answer_of,
    classify_exception,
    error_type,
    retry_after_attributes,
)
from retryscope.instrumentation._containment import FieldError, contained, field_value, note
from retryscope.instrumentation._digests import digest_key_id, idempotency_digest, request_digest
from retryscope.instrumentation._lower_layer import LowerLayerConfig
from retryscope.instrumentation._pricing import Cost, PriceTable, Usage
from retryscope.instrumentation._privacy import DEFAULT_MAX_STRING_BYTES, bound_attributes
from retryscope.instrumentation._redaction import record_exception
from retryscope.instrumentation._sdk import add_clean_attributes, longest_string
from retryscope.instrumentation._sends import (
    NO_EVIDENCE,
    Ordinals,
    SendEvidence,
    SendLedger,
    SendPlace,
    _Operation,
)
from retryscope.instrumentation._shared_numbering import Key, SharedNumbering
from retryscope.vocabulary import (
    BreakerState,
    Decision,
    HedgeResult,
    Layer,
    Outcome,
    OutcomeKind,
    ReconciliationMethod,
    ReconciliationResult,
    RetryOwner,
    SpanRole,
    Terminal,
)

Clock = Callable[[], int]
"""Returns the current time as unix nanoseconds."""

ParentKey = tuple[Layer, int] | None
"""Identifies an attempt's parent within its request: (layer, ordinal), None at the top."""

CarriedParent = tuple[str, int, str | None]
"""The attempt a continuation continues under, in the process that injected the carrier:
(layer value, ordinal, the continuation it was recorded in or None)."""

_SCOPE_KEY: Final = otel_context.create_key("retryscope-scope")
"""The context key of the open scope: its :class:`_Handle` (the scope held weakly)."""
_TRACER_NAME: Final = "retryscope"
_NS_PER_MS: Final = 1_000_000
_CLIENT: Final = trace.SpanKind.CLIENT
_ROLE_ATTEMPT: Final = SpanRole.ATTEMPT.value
_OUTCOME_VALUES: Final = frozenset(o.value for o in Outcome)
# Attribute keys used on every attempt, looked up once.
_K_ROLE: Final = v.SPAN_ROLE.key
_K_LAYER: Final = v.LAYER.key
_K_ORDINAL: Final = v.ATTEMPT_ORDINAL.key
_K_ROUTE_ORDINAL: Final = v.ROUTE_ATTEMPT_ORDINAL.key
_K_ROUTE: Final = v.ROUTE_ID.key
_K_PRIORITY: Final = v.ROUTE_PRIORITY.key
_K_FALLBACK: Final = v.FALLBACK.key
_K_RELEASE: Final = v.ROUTE_RELEASE.key
_K_PARENT_ORDINAL: Final = v.PARENT_ATTEMPT_ORDINAL.key
_K_PARENT_LAYER: Final = v.PARENT_LAYER.key
_K_PARENT_CONTINUATION: Final = v.PARENT_CONTINUATION.key
_K_RETRY_OWNER: Final = v.RETRY_OWNER.key
_K_DEADLINE: Final = v.DEADLINE.key
_K_REMAINING: Final = v.DEADLINE_REMAINING_MS.key
_K_OUTCOME: Final = v.OUTCOME.key
_K_OUTCOME_KIND: Final = v.OUTCOME_KIND.key
_K_ERROR: Final = v.ERROR_TYPE.key
_K_HTTP_STATUS: Final = v.HTTP_STATUS_CODE.key
_K_SIBLING: Final = v.SIBLING_ORDINAL_KEY
_K_RESEND: Final = v.HTTP_RESEND_COUNT.key
_K_HEDGE: Final = v.HEDGE_ORDINAL.key
_K_OVERLAPPING: Final = v.OVERLAPPING_KEY
_K_NOT_BEFORE: Final = v.NOT_BEFORE.key
_K_OPERATION: Final = v.OPERATION_ORDINAL.key
_K_RETRY_LAYER: Final = v.RETRY_LAYER.key
_K_OPERATION_TRY: Final = v.OPERATION_TRY.key
_K_ID: Final = v.LOGICAL_REQUEST_ID.key
_CLASSIFIED_BY: Final = ("http.request.method", "http.method", "rpc.system")
"""A send's own attributes the analytics read its outcome by: written again with its
stamps, before their join keys, so a limit evicts them after the instrumentation's other
start attributes."""
_JOIN_KEYS: Final = (
    *_CLASSIFIED_BY,
    _K_OPERATION,
    _K_ORDINAL,
    _K_PARENT_LAYER,
    _K_PARENT_ORDINAL,
    _K_ROUTE,
    _K_LAYER,
    _K_ROLE,
    _K_ID,
)
"""What joins a span to its request and attempt, least to most needed. Written last (a span
attribute count limit evicts the oldest attribute first), so a limit takes them last."""
_TRANSPORT: Final = Layer.TRANSPORT
_TRANSPORT_VALUE: Final = Layer.TRANSPORT.value
# A plain dict (never mutated): the SDK merges a dict faster than a read-only proxy.
_SUCCESS: Final[Mapping[str, AttributeValue]] = {_K_OUTCOME: Outcome.SUCCESS.value}
_SUCCESS_LONGEST: Final = longest_string(_SUCCESS)
_INT64: Final = 2**63
_CARRIED: Final[weakref.WeakValueDictionary[str, LogicalRequest]] = weakref.WeakValueDictionary()
"""Requests carried out of an open scope by ``inject`` in this process, by id, while any
of their scopes here is open (see :func:`open_scopes`)."""
_E = TypeVar("_E")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Scope:
    """The retryscope context of the code running now (see :func:`current_scope`).

    ``stamp`` is what the processor writes on a span started here (see :class:`Stamps`).
    """

    stamp: Mapping[str, AttributeValue]
    request: LogicalRequest
    attempt: Attempt | None = None
    stamp_longest: int | None = None
    """:func:`~._sdk.longest_string` of ``stamp`` (None: not known clean)."""


_SiblingKey = tuple[str, int, str]
"""(parent layer, parent ordinal, layer); ("", 0, layer) at the top of the request."""

_MAY_BE_CALL: Final = "transport call"
"""The sibling key's last part for sends that may turn into calls (never a layer)."""

_MayBeCall = tuple[ParentKey, SendPlace, Ordinals, Layer]
"""(parent key, place, ordinals, call layer) of a send that may turn into a call."""

_TransportBase = tuple[
    dict[str, AttributeValue],
    dict[str, AttributeValue],
    tuple[dict[str, AttributeValue], dict[str, AttributeValue]],
    int | None,
    tuple[str, str],
    _SiblingKey,
    ParentKey,
]
"""What every transport send under one parent shares: attributes, the join keys among them
(written last, see :data:`_JOIN_KEYS`), all of a plain send's attributes in their order
(ordinals zero; without and with a sibling ordinal), their longest string, route key,
sibling key and parent key (see :meth:`LogicalRequest.transport_attempt_values`)."""


def _sibling_key(parent: Attempt | None, layer: Layer) -> _SiblingKey:
    """The key counting ``layer``'s attempts under ``parent`` (plain values: cheap hashing,
    where a key holding ``Layer`` members hashes them in Python)."""
    if parent is None:
        return ("", 0, layer._value_)
    return (parent._layer_value, parent.ordinal, layer._value_)


class Stamps:
    """What the stamping processor writes on a span started under one request or attempt.

    Built once per request/attempt, on its first foreign span (attempts with none never
    pay for it): ``stamp`` and ``longest`` (:func:`~._sdk.longest_string` of it,
    None when not known clean) as a plain dict the span merges directly; ``transport``
    the parent of the transport attempts its HTTP client spans become (``parent`` is None
    at the top of the request), or ``transport`` False inside a transport attempt, where
    such a span is the same send seen twice and is only stamped. Inside a send that may be
    a call (:meth:`LogicalRequest.send` with ``call_layer``) such a span is a send of that
    send's parent, and turns it into a call.
    """

    __slots__ = ("longest", "parent", "request", "stamp", "transport")

    def __init__(
        self,
        request: LogicalRequest,
        stamp: dict[str, AttributeValue],
        longest: int | None,
        parent: Attempt | None,
        transport: bool,
    ) -> None:
        self.request = request
        self.stamp = stamp
        self.longest = longest
        self.parent = parent
        self.transport = transport


def _add_place_attributes(attrs: dict[str, AttributeValue], place: SendPlace) -> None:
    """Add a send's operation (the layer that retried it, the caller's try) to ``attrs``."""
    attrs[_K_OPERATION] = place.operation
    if place.retry_layer is not None:
        attrs[_K_RETRY_LAYER] = str(place.retry_layer)
    if place.tries > 1:
        attrs[_K_OPERATION_TRY] = place.tries


def _join_keys_last(attrs: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """``attrs`` with the join keys it holds moved to its end (see :data:`_JOIN_KEYS`)."""
    for key in _JOIN_KEYS:
        if key in attrs:
            attrs[key] = attrs.pop(key)
    return attrs


def _dropped_any(span: Span) -> bool:
    """Whether ``span``'s attribute count limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``)
    evicted any of its attributes."""
    return bool(getattr(span, "dropped_attributes", 0))


def _keep_join_keys(span: Span, written: Mapping[str, AttributeValue]) -> None:
    """Before ``span``, which lost attributes to its count limit (:func:`_dropped_any`),
    ends: write ``written`` (what retryscope wrote on it) again, join keys last: the limit
    then evicts the application's oldest attributes instead, and the span still joins its
    request and attempt."""
    kept = span.attributes or {}  # type: ignore[attr-defined]
    # moved to the end first (no eviction), then the evicted ones, each evicting the oldest
    span.set_attributes(_join_keys_last({k: val for k, val in written.items() if k in kept}))
    span.set_attributes(_join_keys_last({k: val for k, val in written.items() if k not in kept}))


def _span_id_in(ctx: otel_context.Context | None = None) -> int | None:
    """Span id of the current span of ``ctx`` (default: the current context), None when
    there is none: the direct parent of a span started in ``ctx``."""
    parent = trace.get_current_span(ctx).get_span_context()
    return parent.span_id if parent.is_valid else None


class _Handle(weakref.ref["Attempt | LogicalRequest"]):
    """What a context holds of an open scope (``logical_request``/``attempt``): the scope,
    weakly. The scope keeps the token that restores the context it was entered in, and
    that context the scope entered before it: held strongly, scopes the application enters
    and never exits (``__enter__`` without ``__exit__``, a generator never resumed nor
    closed) would each keep every earlier one alive. Held weakly, a scope lives while the
    application can still exit it; once it cannot (nothing but contexts refers to it), it
    is collected with its token, attempts and span, it stamps and parents nothing more
    (:func:`live_owner`), and it is counted in :func:`abandoned_scopes`. Its span is never
    ended, so never exported: like any span never ended, its request reads as missing its
    terminal."""

    __slots__ = ()


_OPEN_SCOPES: Final[set[_Handle | None]] = set()
"""The handles of the scopes entered and not yet exited in this process (a scope adds its
handle on entry and discards it on exit; None, a scope never entered, is never added), so
that a scope collected without its exit is counted (a weak reference that is itself
garbage calls no callback). Bounded by the scopes alive: each leaves when it exits or is
collected."""
_abandoned = [0]


def _collected(handle: _Handle) -> None:
    """A scope was collected: counted when it never exited."""
    if handle in _OPEN_SCOPES:
        _OPEN_SCOPES.discard(handle)
        _abandoned[0] += 1


def abandoned_scopes() -> int:
    """Scopes (``logical_request``/``attempt``) this process entered and collected without
    their exit: the application lost every reference to them (see :class:`_Handle`)."""
    return _abandoned[0]


def _scope_context(
    parent: otel_context.Context, span: Span, handle: _Handle
) -> otel_context.Context:
    """``parent`` with ``span`` as its current span and ``handle`` as its scope."""
    return otel_context.set_value(_SCOPE_KEY, handle, trace.set_span_in_context(span, parent))


def _owner_in(ctx: otel_context.Context | None = None) -> object:
    """The scope ``ctx`` (default: the current context) holds, None when none (or it was
    collected)."""
    handle = otel_context.get_value(_SCOPE_KEY, ctx)
    return handle() if type(handle) is _Handle else None


def open_scopes(request_id: str) -> int:
    """How many scopes of the logical request ``request_id`` are open in this process: its
    own and the continuations extracted here from a carrier it injected (0 when it was never
    injected). An in-process continuation's attempts belong to the request it continues, so
    the live metrics record the request when the last of these scopes ends."""
    holder = _CARRIED.get(request_id) if _CARRIED else None
    return holder._scopes if holder is not None else 0


def live_owner(owner: object) -> Attempt | LogicalRequest | None:
    """What the scope ``owner`` (a context's value under the scope key) stands for now:
    itself while open; once ended, its nearest enclosing attempt still open, else its
    request while open; None once the request has ended.

    A context can outlive the scope it holds: Python runs a generator in its consumer's
    context, so an async generator abandoned inside ``logical_request``/``attempt`` leaves
    that scope attached to the consuming task, and closing it later (asyncio closes it in
    another task) cannot detach it there. An ended scope stamps nothing and parents
    nothing."""
    if type(owner) is Attempt:
        request = owner.request
        if request._over():
            return None
        attempt: Attempt | None = owner
        while attempt is not None and attempt._ended:
            attempt = attempt.parent
        return attempt if attempt is not None else request
    if type(owner) is LogicalRequest:
        return None if owner._over() else owner
    return None


def _parent_in(request: LogicalRequest) -> Attempt | None:
    """The open attempt of ``request`` in the current scope: the parent of one opened now."""
    owner = live_owner(_owner_in())
    return owner if type(owner) is Attempt and owner.request is request else None


@contained("current_scope")
def current_scope(ctx: otel_context.Context | None = None) -> Scope | None:
    """The scope active in ``ctx`` (default: the current context), or None (also when the
    scope ``ctx`` holds has ended: see :func:`live_owner`)."""
    owner = live_owner(_owner_in(ctx))
    return owner.scope() if owner is not None else None


def _to_unix_ns(value: int | datetime | None, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise FieldError(field, "datetime must be timezone-aware")
        return field_value(field, lambda: int(value.timestamp() * 1_000_000) * 1000)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _INT64:
        raise FieldError(field, f"expected unix nanoseconds (int >= 0), got {value!r:.40}")
    return value


def _require_int(value: int | None, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _INT64:
        raise FieldError(field, f"expected an integer >= 0, got {value!r:.40}")
    return value


def _optional_text(value: str | None, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise FieldError(field, f"expected a string, got {type(value).__name__}")
    return value


def _text(value: str, field: str, neutral: str = "unknown") -> str:
    if not isinstance(value, str):
        raise FieldError(field, f"expected a string, got {type(value).__name__}", neutral)
    return value


def _member(enum: Callable[[Any], _E], value: Any, field: str, neutral: Any = None) -> _E:
    """``enum(value)``, or a :class:`FieldError` for ``field``."""
    return field_value(field, lambda: enum(value), neutral)  # type: ignore[return-value]


def _breaker_attributes(
    state: BreakerState | str,
    generation: int,
    fields: tuple[str, str] = ("breaker_state", "breaker_generation"),
) -> dict[str, AttributeValue]:
    gen = _require_int(generation, fields[1])
    member = _member(BreakerState, state, fields[0])
    return {v.BREAKER_STATE.key: member.value, v.BREAKER_GENERATION_KEY: gen or 0}


def _now(clock: Clock) -> int:
    """``clock()``; a clock that raises or answers anything but unix ns is contained and
    answered by the system clock (an application's simulated clock may be broken)."""
    try:
        value = clock()
    except Exception as exc:
        note("clock", exc)
        return time.time_ns()
    if type(value) is not int or not 0 <= value < _INT64:
        note("clock", FieldError("clock", f"returned {type(value).__name__}, not unix ns"))
        return time.time_ns()
    return value


def _itself(self: T, *args: Any, **kwargs: Any) -> T:
    """Fallback of a contained ``__enter__``: the object, whatever failed."""
    return self


def _outcome_left_unknown(self: Attempt, *args: Any, **kwargs: Any) -> None:
    """Fallback of a contained ``set_outcome``: the outcome stays unrecorded and the attempt
    is not taken for a success when it closes."""
    self._outcome_unknown = True


class Attempt:
    """One physical attempt; a context manager around its span.

    Create it with :meth:`LogicalRequest.attempt`. Setters may be called while the attempt
    is open; they write span attributes immediately.
    """

    def __init__(
        self,
        request: LogicalRequest,
        *,
        ordinal: int,
        route_ordinal: int,
        route: str,
        route_release: str | None,
        layer: Layer,
        route_priority: int,
        attributes: Mapping[str, AttributeValue] | None,
        parent: Attempt | None = None,
        sibling_ordinal: int = 1,
        name: str | None = None,
        hedge_ordinal: int | None = None,
        resend_count: int | None = None,
        in_current_span: bool = False,
    ) -> None:
        self.request = request
        self._in_current_span = in_current_span
        """A send: its span is a child of the span current when it starts (an SDK's call
        span, say), not necessarily of its parent attempt's."""
        self.parent = parent
        self._resend = resend_count
        """For a send placed by :class:`~._sends.SendLedger`: its resends before it (None:
        counted by sibling, as for any explicit transport attempt)."""
        self.sibling_ordinal = sibling_ordinal
        """1-based number among this layer's attempts under the same parent attempt."""
        self.hedge_ordinal = hedge_ordinal
        self.name = name or f"attempt {route}"
        self.usage: Usage | None = None
        self.hedge_result: HedgeResult | None = None
        self.ordinal = ordinal
        self.route_ordinal = route_ordinal
        self.route = route
        self.route_release = route_release
        self.layer = layer
        self._layer_value: str = layer._value_
        self.route_priority = route_priority
        self.outcome: Outcome | None = None
        self.kind: OutcomeKind | None = None
        self.started_at: int | None = None
        self.ended_at: int | None = None
        self._extra = dict(attributes or {})
        self._span: Span | None = None
        self._token: object | None = None
        self._handle: _Handle | None = None
        """What contexts hold of it while it is open (see :class:`_Handle`)."""
        self._transport_base: _TransportBase | None = None
        self._sibling_key = _sibling_key(parent, layer)
        self._stamps: Stamps | None = None
        self._scope: Scope | None = None
        self._contained: list[str] | None = None  # entry points that failed on it
        self._outcome_unknown = False  # set_outcome failed: no implicit success at exit
        self._written: Mapping[str, AttributeValue] = _SUCCESS
        """The attributes its span started with (kept against attribute limits)."""
        self._may_be_call: _MayBeCall | None = None
        """A send that turns into a call when a send starts beneath it (set by
        :meth:`LogicalRequest.send`): what registers it with the send ledger."""
        self._operation: _Operation | None = None
        """A send's operation in the send ledger (set by :meth:`LogicalRequest.send`): told
        at close whether the send failed."""
        self._ended = False
        """Closed: its scope no longer stamps nor parents (see :func:`live_owner`)."""

    # -- span lifecycle ----------------------------------------------------------------------
    @contained("Attempt.__enter__", fallback=_itself)
    def __enter__(self) -> Self:
        req = self.request
        now = req.clock() if req.clock is time.time_ns else _now(req.clock)
        self.started_at = now
        attrs = req._stamp.copy()
        if self._extra:
            attrs.update(self._extra)
        attrs[_K_ROLE] = _ROLE_ATTEMPT
        attrs[_K_LAYER] = self._layer_value
        attrs[_K_ORDINAL] = self.ordinal
        attrs[_K_ROUTE_ORDINAL] = self.route_ordinal
        attrs[_K_ROUTE] = self.route
        attrs[_K_PRIORITY] = self.route_priority
        attrs[_K_FALLBACK] = self.route_priority > 0
        if self.route_release is not None:
            attrs[_K_RELEASE] = self.route_release
        parent_attempt = self.parent
        if parent_attempt is not None or req.carried_parent is not None:
            attrs.update(req._parent_attributes(parent_attempt))
        if self.sibling_ordinal > 1:
            attrs[_K_SIBLING] = self.sibling_ordinal
            if self.layer is _TRANSPORT and self._resend is None:  # OTel: absent on the first
                attrs[_K_RESEND] = self.sibling_ordinal - 1
        if self._resend:
            attrs[_K_RESEND] = self._resend
        if req._sends.not_before is not None and _K_NOT_BEFORE not in attrs:
            not_before = req._take_not_before()
            if not_before is not None:
                attrs[_K_NOT_BEFORE] = not_before
        if self.hedge_ordinal is not None:
            attrs[_K_HEDGE] = self.hedge_ordinal
        if req._open_sibling(self):
            attrs[_K_OVERLAPPING] = True
        if req._retry_owner_value is not None:
            attrs[_K_RETRY_OWNER] = req._retry_owner_value
        if req.deadline is not None:
            attrs[_K_DEADLINE] = req.deadline
            attrs[_K_REMAINING] = (req.deadline - now) // _NS_PER_MS
        if self._contained:
            attrs[v.CONTAINED_ERRORS_KEY] = list(self._contained)
        parent_span = parent_attempt._span if parent_attempt is not None else req._span
        if parent_span is None:
            parent_span = req.span  # raises: the request is not open
        current = otel_context.get_current()
        if self._in_current_span or trace.get_current_span(current) is parent_span:
            parent = current
        else:
            parent = trace.set_span_in_context(parent_span, current)
        self._span = span = req.tracer.start_span(
            self.name,
            context=parent,
            kind=_CLIENT,
            attributes=attrs,
            start_time=now,
        )
        self._written = attrs
        self._handle = handle = _Handle(self, _collected)
        _OPEN_SCOPES.add(handle)
        self._token = otel_context.attach(_scope_context(parent, span, handle))
        return self

    @contained("Attempt.__exit__")
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, token = self._span, self._token
        self._token = None
        try:
            if span is None:  # never opened (its __enter__ failed): only the bookkeeping
                return
            if exc is not None:
                record_exception(span, exc)
                answer = answer_of(exc)
                if self.kind is None and self.outcome is None:
                    self.set_outcome(
                        classify_exception(exc),
                        error=error_type(exc),
                        http_status=answer.status if answer is not None else None,
                    )
                else:
                    span.set_attribute(v.ERROR_TYPE.key, error_type(exc))
                if answer is not None:
                    self._record_answer(answer)
            elif (
                self.outcome is None
                and not self._outcome_unknown
                and self.hedge_result is not HedgeResult.CANCELLED
            ):
                # closed cleanly and unclassified: it worked
                self.outcome = Outcome.SUCCESS
                add_clean_attributes(span, _SUCCESS, _SUCCESS_LONGEST)
            if self.outcome is not None and self.outcome is not Outcome.SUCCESS:
                span.set_status(Status(StatusCode.ERROR, self.kind.value if self.kind else None))
        finally:  # whatever failed above: closed, detached and ended
            self._close(span, token)

    def _close(self, span: Span | None, token: object | None) -> None:
        """The end of an attempt that always happens: its end time, its request's
        bookkeeping, the context restored and the span ended (each even if one before
        failed)."""
        self._ended = True
        _OPEN_SCOPES.discard(self._handle)
        try:
            clock = self.request.clock
            self.ended_at = clock() if clock is time.time_ns else _now(clock)
            if self.started_at is not None:  # entered: registered as open
                self.request._attempt_closed(self)
        finally:
            try:
                if token is not None:
                    otel_context.detach(token)  # type: ignore[arg-type]
            finally:
                if span is not None:
                    try:
                        if getattr(span, "dropped_attributes", 0):  # (_dropped_any, inline)
                            _keep_join_keys(span, self._written_now())
                    finally:
                        span.end(end_time=self.ended_at)

    def _written_now(self) -> dict[str, AttributeValue]:
        """What retryscope wrote on the attempt's span: its start attributes but the
        caller's, and its outcome."""
        extra = self._extra
        written = {k: val for k, val in self._written.items() if k not in extra}
        if self.outcome is not None:
            written[_K_OUTCOME] = self.outcome.value
        if self.kind is not None:
            written[_K_OUTCOME_KIND] = self.kind.value
        return written

    def _record_answer(self, answer: Answer) -> None:
        """The status and Retry-After of the response the attempt's exception carried:
        recorded, and (unless a send already announced one) the hint sets the request's
        earliest next start."""
        self.span.set_attribute(_K_HTTP_STATUS, answer.status)
        hint = retry_after_attributes(answer.headers)
        if not hint:
            return
        self.span.set_attributes(hint)
        delay = hint.get(v.HTTP_RETRY_AFTER_PARSED_MS_KEY)
        req = self.request
        if isinstance(delay, int) and req._sends.not_before is None and answer.status >= 400:
            req.note_retry_after(delay)

    def scope(self) -> Scope:
        """This attempt's :class:`Scope` (built once, on first use)."""
        scope = self._scope
        if scope is None:
            stamps = self.stamps()
            scope = self._scope = Scope(
                MappingProxyType(stamps.stamp), self.request, self, stamps.longest
            )
        return scope

    def stamps(self) -> Stamps:
        """What the stamping processor writes on spans started inside this attempt (built
        once, on first use): the request's stamp with this attempt's ordinal and route."""
        stamps = self._stamps
        if stamps is None:
            req = self.request
            stamp = req._stamp.copy()
            stamp[_K_ORDINAL] = self.ordinal
            stamp[_K_ROUTE] = self.route
            _join_keys_last(stamp)
            longest = req.stamp_longest
            if longest is not None:  # the ordinal is ours (an int); the route is the caller's
                longest = max(longest, len(self.route)) if type(self.route) is str else None
            if self._may_be_call is not None:  # spans beneath it may be its sends
                stamps = self._stamps = Stamps(req, stamp, longest, self.parent, transport=True)
            else:
                stamps = self._stamps = Stamps(
                    req, stamp, longest, self, transport=self.layer is not _TRANSPORT
                )
        return stamps

    @property
    def span(self) -> Span:
        if self._span is None:
            raise RuntimeError("attempt is not open: use it as a context manager")
        return self._span

    @property
    def key(self) -> tuple[Layer, int]:
        """(layer, ordinal): unique within the logical request."""
        return (self.layer, self.ordinal)

    # -- what the retry owner records -------------------------------------------------------
    @contained("Attempt.set_backoff")
    def set_backoff(
        self,
        *,
        delay_ms: int | None = None,
        retry_after_ms: int | None = None,
        not_before: int | datetime | None = None,
    ) -> None:
        """The delay scheduled before this attempt, the server's hint, the earliest start."""
        attrs: dict[str, AttributeValue] = {}
        if (d := _require_int(delay_ms, "delay_ms")) is not None:
            attrs[v.BACKOFF_DELAY_MS.key] = d
        if (r := _require_int(retry_after_ms, "retry_after_ms")) is not None:
            attrs[v.RETRY_AFTER_MS.key] = r
        if (nb := _to_unix_ns(not_before, "not_before")) is not None:
            attrs[v.NOT_BEFORE.key] = nb
        self.span.set_attributes(attrs)

    @contained("Attempt.set_cost")
    def set_cost(
        self,
        *,
        reserved: int | None = None,
        actual: int | None = None,
        currency: str = "USD",
        estimated: bool | None = None,
    ) -> None:
        """Cost in integer micro-units. Without ``actual`` the reservation stands (estimated)."""
        currency = _text(currency, "currency", "USD")
        if estimated is not None and not isinstance(estimated, bool):
            raise FieldError("estimated", f"expected a bool, got {type(estimated).__name__}")
        attrs: dict[str, AttributeValue] = {v.COST_CURRENCY.key: currency}
        if (r := _require_int(reserved, "reserved")) is not None:
            attrs[v.COST_RESERVED.key] = r
        if (a := _require_int(actual, "actual")) is not None:
            attrs[v.COST_ACTUAL.key] = a
        attrs[v.COST_ESTIMATED.key] = (actual is None) if estimated is None else estimated
        self.span.set_attributes(attrs)

    @contained("Attempt.set_outcome", fallback=_outcome_left_unknown)
    def set_outcome(
        self,
        outcome: Outcome | OutcomeKind | str,
        kind: OutcomeKind | str | None = None,
        *,
        error: str | None = None,
        http_status: int | None = None,
    ) -> None:
        """Record what the attempt observed.

        ``set_outcome("success")``, ``set_outcome("retryable", "rate_limited")`` or just
        the kind, ``set_outcome("rate_limited")``; a kind must belong to the family given.
        An invalid outcome is contained and leaves the outcome unrecorded (never an implicit
        success); an invalid ``error`` or ``http_status`` alone is left out.
        """
        if error is not None and type(error) is not str:
            error = _text(error, "error")
        if http_status is not None and not (type(http_status) is int and 0 < http_status < 1000):
            raise FieldError(
                "http_status", f"expected an HTTP status code, got {http_status!r:.40}"
            )
        if kind is None and not (isinstance(outcome, str) and outcome in _OUTCOME_VALUES):
            kind = OutcomeKind(outcome)
            family = kind.family
        else:
            family = Outcome(outcome)
            kind = OutcomeKind(kind) if kind is not None else None
        if family is Outcome.SUCCESS and kind is not None:
            raise ValueError(f"a success has no failure kind (got {kind.value!r})")
        if family is not Outcome.SUCCESS:
            if kind is None:
                raise ValueError(f"outcome {family.value!r} needs a failure kind")
            if kind.family is not family:
                raise ValueError(f"kind {kind.value!r} is {kind.family.value}, not {family.value}")
        span = self.span
        self.outcome, self.kind = family, kind
        if kind is None and error is None and http_status is None:
            add_clean_attributes(span, _SUCCESS, _SUCCESS_LONGEST)
            return
        attrs: dict[str, AttributeValue] = {_K_OUTCOME: family.value}
        if kind is not None:
            attrs[_K_OUTCOME_KIND] = kind.value
        if error is not None:
            attrs[_K_ERROR] = error
        elif kind is not None:
            attrs[_K_ERROR] = kind.value
        if http_status is not None:
            attrs[_K_HTTP_STATUS] = http_status
        add_clean_attributes(span, attrs, longest_string(attrs))

    @contained("Attempt.set_decision")
    def set_decision(self, decision: Decision | str) -> None:
        """What the retry owner decided after this attempt."""
        self.span.set_attribute(v.DECISION.key, Decision(decision).value)

    @contained("Attempt.set_attributes")
    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Any further attributes on the attempt span; strings bounded (see ``privacy``)."""
        self.span.set_attributes(bound_attributes(attributes, self.request.max_string_bytes))

    # -- semantic conventions and cost -------------------------------------------------------
    @contained("Attempt.set_gen_ai")
    def set_gen_ai(
        self,
        *,
        provider: str | None = None,
        request_model: str | None = None,
        response_model: str | None = None,
        operation: str | None = None,
        response_id: str | None = None,
    ) -> None:
        """OpenTelemetry GenAI attributes of the model call this attempt made."""
        attrs: dict[str, AttributeValue] = {}
        for attr, value in (
            (v.GEN_AI_PROVIDER, provider),
            (v.GEN_AI_REQUEST_MODEL, request_model),
            (v.GEN_AI_RESPONSE_MODEL, response_model),
            (v.GEN_AI_OPERATION, operation),
            (v.GEN_AI_RESPONSE_ID, response_id),
        ):
            if value is not None:
                attrs[attr.key] = value
        self.set_attributes(attrs)

    @contained("Attempt.set_usage")
    def set_usage(
        self, *, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0
    ) -> Usage | None:
        """Token usage the provider reported (``gen_ai.usage.*``); kept for pricing (None:
        invalid, contained, nothing recorded)."""
        usage = Usage(input_tokens, output_tokens, cached_input_tokens)
        self.usage = usage
        attrs: dict[str, AttributeValue] = {
            v.GEN_AI_INPUT_TOKENS.key: input_tokens,
            v.GEN_AI_OUTPUT_TOKENS.key: output_tokens,
        }
        if cached_input_tokens:
            attrs[v.GEN_AI_CACHED_TOKENS_KEY] = cached_input_tokens
        self.span.set_attributes(attrs)
        return usage

    @contained("Attempt.set_error_type")
    def set_error_type(self, error: str) -> None:
        """OpenTelemetry ``error.type`` (e.g. an exception class or an HTTP status)."""
        self.set_attributes({v.ERROR_TYPE.key: error})

    @contained("Attempt.price")
    def price(self, table: PriceTable, *, reserved: int) -> Cost | None:
        """Turn this attempt's usage into cost with ``table`` and record it.

        With usage unknown (never reported) or no price for the route release, the
        reservation stands as the cost and the cost is marked estimated, with the reason.
        None: the table or reservation was invalid (contained, nothing recorded).
        """
        _require_int(reserved, "reserved")
        if not isinstance(table, PriceTable):
            raise FieldError("table", f"expected a PriceTable, got {type(table).__name__}")
        cost = table.cost(self.route_release, self.usage, reserved=reserved)
        self.set_cost(
            reserved=reserved, actual=cost.micros, currency=cost.currency, estimated=cost.estimated
        )
        attrs: dict[str, AttributeValue] = {
            v.PRICE_TABLE_DIGEST.key: cost.table_digest,
            v.PRICE_TABLE_VERSION_KEY: cost.table_version,
        }
        if cost.estimate_reason is not None:
            attrs[v.COST_ESTIMATE_REASON_KEY] = cost.estimate_reason
        self.span.set_attributes(attrs)
        return cost

    # -- hedging, breakers, lower layers --------------------------------------------------
    @contained("Attempt.commit_hedge")
    def commit_hedge(self) -> None:
        """This hedge (or the primary of a hedge group) won: its result is the one used."""
        self._require_hedge()
        self.hedge_result = HedgeResult.WINNER
        self.span.set_attribute(v.HEDGE_RESULT_KEY, HedgeResult.WINNER.value)

    @contained("Attempt.cancel_hedge")
    def cancel_hedge(self, *, cost_actual: int | None = None, currency: str = "USD") -> None:
        """This hedge lost and was cancelled; ``cost_actual`` is what it still incurred."""
        _require_int(cost_actual, "cost_actual")
        self._require_hedge()
        self.hedge_result = HedgeResult.CANCELLED
        self.span.set_attribute(v.HEDGE_RESULT_KEY, HedgeResult.CANCELLED.value)
        if cost_actual is not None:
            self.set_cost(actual=cost_actual, currency=currency, estimated=False)

    def _require_hedge(self) -> None:
        if self.hedge_ordinal is None:
            raise ValueError("not part of a hedge group: open it with hedge_ordinal=")

    @contained("Attempt.set_breaker")
    def set_breaker(self, state: BreakerState | str, generation: int) -> None:
        """The route's circuit-breaker state and generation when this attempt dispatched."""
        self.span.set_attributes(_breaker_attributes(state, generation, ("state", "generation")))

    @contained("Attempt.declare_lower_layer")
    def declare_lower_layer(self, config: LowerLayerConfig) -> None:
        """Retry configuration of the layer below (e.g. the SDK client's ``max_retries``)."""
        self.span.set_attributes(config.attributes())


def _unnumbered_attempt(self: LogicalRequest, *args: Any, **kwargs: Any) -> Attempt:
    """Fallback of a contained :meth:`LogicalRequest.attempt` that no single argument
    explains: an attempt with ordinal 0 (no ordinal was allocated; the analytics flag it as
    an anomaly) on route ``unknown``, so the code under it still runs."""
    return Attempt(
        self,
        ordinal=0,
        route_ordinal=0,
        route="unknown",
        route_release=None,
        layer=Layer.HARNESS,
        route_priority=0,
        attributes=None,
    )


class LogicalRequest:
    """One logical request and its span; a context manager. See :func:`logical_request`."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        operation: str,
        tenant: str | None,
        idempotency_key: str | None,
        request: Any,
        deadline: int | datetime | None,
        retry_owner: RetryOwner | str | None,
        logical_request_id: str | None,
        policy_digest: str | None,
        clock: Clock,
        attributes: Mapping[str, AttributeValue] | None,
        max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
        role: SpanRole = SpanRole.LOGICAL_REQUEST,
        parent_context: otel_context.Context | None = None,
        ordinal_base: Mapping[Layer, int] | None = None,
        digests: tuple[str | None, str | None] | None = None,
        carried_key_id: str | None = None,
        continuation: str | None = None,
        carried_parent: CarriedParent | None = None,
    ) -> None:
        # Every argument is checked before anything else happens: an invalid one raises a
        # FieldError naming it, and the contained logical_request() opens the request again
        # without it (what was valid is still recorded).
        operation = _text(operation, "operation")
        tenant = _optional_text(tenant, "tenant")
        logical_request_id = _optional_text(logical_request_id, "logical_request_id")
        policy_digest = _optional_text(policy_digest, "policy_digest")
        if not callable(clock):
            raise FieldError("clock", "expected a callable returning unix ns", time.time_ns)
        if type(max_string_bytes) is not int or max_string_bytes < 1:
            raise FieldError("max_string_bytes", "expected an int >= 1", DEFAULT_MAX_STRING_BYTES)
        self.tracer = tracer
        self.role = role
        self.continuation = continuation
        """This process's continuation of the request (its id), None where it began."""
        self.carried_parent = carried_parent
        """The attempt elsewhere this continuation's outermost attempts are nested in."""
        self.max_string_bytes = max_string_bytes
        self._parent_context = parent_context
        self.clock = clock
        self.operation = operation
        self.tenant = tenant
        self.id = logical_request_id or uuid.uuid4().hex
        self.deadline = _to_unix_ns(deadline, "deadline")
        self.retry_owner = (
            _member(RetryOwner, retry_owner, "retry_owner") if retry_owner is not None else None
        )
        self._retry_owner_value = self.retry_owner.value if self.retry_owner is not None else None
        self.idempotency_digest = (
            field_value(
                "idempotency_key",
                lambda: idempotency_digest(tenant or "", operation, idempotency_key),
            )
            if idempotency_key is not None
            else None
        )
        self.request_digest = (
            field_value("request", lambda: request_digest(request)) if request is not None else None
        )
        self.digest_key_id = digest_key_id()
        if digests is not None:  # a continuation carries the digests, never the raw values
            self.idempotency_digest, self.request_digest = digests
            self.digest_key_id = carried_key_id
        if self.idempotency_digest is None and self.request_digest is None:
            self.digest_key_id = None
        self.policy_digest = policy_digest
        self.terminal: Terminal | None = None
        self.attempts: list[Attempt] = []
        self._extra: dict[str, AttributeValue] = (
            field_value("attributes", lambda: bound_attributes(attributes or {}, max_string_bytes))
            or {}
        )
        self._contained: list[str] | None = None  # entry points that failed on it
        self._lock = threading.Lock()
        # Keyed by the layer's value: a str hashes in C, a Layer member in Python.
        self._ordinals: dict[str, int] = {
            Layer(layer)._value_: n for layer, n in (ordinal_base or {}).items()
        }
        # Keyed by plain str/int tuples (see _sibling_key): hashing them stays in C.
        self._route_ordinals: dict[tuple[str, str], int] = {}
        self._siblings: dict[_SiblingKey, int] = {}
        self._open: dict[_SiblingKey, int] = {}
        self._pending: dict[ParentKey, dict[str, AttributeValue]] = {}
        self._sends = SendLedger()
        self._shared: SharedNumbering | None = None
        """Counters shared with forked children, once this request has forked."""
        self._span: Span | None = None
        self._token: object | None = None
        self._handle: _Handle | None = None
        """What contexts hold of it while it is open (see :class:`_Handle`)."""
        self._written: dict[str, AttributeValue] = {}
        """The attributes its span started with, and its terminal (kept against attribute
        limits)."""
        self._ended = False
        """Closed: its scope no longer stamps nor parents (see :func:`live_owner`)."""
        stamp: dict[str, AttributeValue] = {v.OPERATION.key: operation}
        if self.idempotency_digest is not None:
            stamp[v.IDEMPOTENCY_DIGEST.key] = self.idempotency_digest
        if tenant is not None:
            stamp[v.TENANT.key] = tenant
        if self.request_digest is not None:
            stamp[v.LOGICAL_REQUEST_DIGEST.key] = self.request_digest
        if policy_digest is not None:
            stamp[v.POLICY_DIGEST.key] = policy_digest
        if continuation is not None:
            stamp[v.CONTINUATION.key] = continuation
        stamp[_K_ID] = self.id  # last: see _JOIN_KEYS
        self._stamp = stamp  # never mutated: copied by attempts, merged by spans
        self.stamp: Mapping[str, AttributeValue] = MappingProxyType(stamp)
        self.stamp_longest = longest_string(stamp)
        self._transport_base: _TransportBase | None = None
        self._scope_holder: LogicalRequest | None = None
        """The request whose open scopes this one counts in (see :func:`open_scopes`)."""
        self._scopes = 0
        self._stamps = Stamps(self, stamp, self.stamp_longest, None, transport=True)
        self._scope = Scope(self.stamp, self, None, self.stamp_longest)

    @contained("LogicalRequest.__enter__", fallback=_itself)
    def __enter__(self) -> Self:
        attrs: dict[str, AttributeValue] = dict(self.stamp)
        attrs.update(self._extra)
        if self._contained:
            attrs[v.CONTAINED_ERRORS_KEY] = list(self._contained)
        attrs[v.SPAN_ROLE.key] = self.role.value
        if self.retry_owner is not None:
            attrs[v.RETRY_OWNER.key] = self.retry_owner.value
        if self.deadline is not None:
            attrs[v.DEADLINE.key] = self.deadline
        if self.digest_key_id is not None:
            attrs[v.DIGEST_KEY_ID_KEY] = self.digest_key_id
        self._span = span = self.tracer.start_span(
            f"{self.role.value} {self.operation}",
            context=self._parent_context,
            attributes=attrs,
            start_time=_now(self.clock),
        )
        self._written = attrs
        parent = self._parent_context
        self._handle = handle = _Handle(self, _collected)
        _OPEN_SCOPES.add(handle)
        self._token = otel_context.attach(
            _scope_context(otel_context.get_current() if parent is None else parent, span, handle)
        )
        if self.role is SpanRole.CONTINUATION and _CARRIED:
            holder = _CARRIED.get(self.id)
            if holder is not None and holder._join():
                self._scope_holder = holder
        return self

    def _join(self) -> bool:
        """One more open scope counts in this carried request, unless it closed since it
        was looked up."""
        with self._lock:
            if self._scopes <= 0:
                return False
            self._scopes += 1
            return True

    def _leave(self) -> None:
        """One of the open scopes counting in this request ended."""
        with self._lock:
            self._scopes -= 1
            if self._scopes <= 0 and _CARRIED.get(self.id) is self:
                del _CARRIED[self.id]

    def _carried(self) -> None:
        """``inject`` carried this open request out: a continuation extracted in this
        process while it is open counts as one of its scopes (:func:`open_scopes`)."""
        if self._span is None or self._scope_holder is not None:
            return
        with self._lock:
            self._scopes += 1
            self._scope_holder = self
        _CARRIED.setdefault(self.id, self)

    def _scope_ended(self) -> None:
        """One of the open scopes this request counts in ended (before its span ends, so
        the live metrics see the count without it)."""
        holder = self._scope_holder
        if holder is not None:
            holder._leave()

    def scope(self) -> Scope:
        """The request's own :class:`Scope` (outside any of its attempts)."""
        return self._scope

    def stamps(self) -> Stamps:
        """What the stamping processor writes on spans started outside its attempts."""
        return self._stamps

    @contained("LogicalRequest.__exit__")
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, token = self._span, self._token
        self._token = None
        end: int | None = None
        try:
            if span is None:  # never opened (its __enter__ failed)
                return
            end = _now(self.clock)
            if exc is not None:
                record_exception(span, exc)
                span.set_attribute(v.ERROR_TYPE.key, error_type(exc))
            # Only the terminal: attempt counts and retried layers are the analytics' to
            # compute over every process's spans (a consumer elsewhere adds attempts to it).
            terminal = self.terminal or self._derived_terminal(end)
            span.set_attribute(v.TERMINAL.key, terminal.value)
            self._written[v.TERMINAL.key] = terminal.value
            if terminal is not Terminal.COMPLETE:
                span.set_status(Status(StatusCode.ERROR, terminal.value))
        finally:  # whatever failed above: the context restored and the span ended
            self._ended = True
            _OPEN_SCOPES.discard(self._handle)
            if self._shared is not None:
                self._shared.end()
            try:
                if token is not None:
                    otel_context.detach(token)  # type: ignore[arg-type]
                if self._scope_holder is not None:
                    self._scope_ended()
            finally:
                if span is not None:
                    try:
                        if _dropped_any(span):
                            extra = self._extra
                            written = self._written
                            _keep_join_keys(
                                span, {k: written[k] for k in written if k not in extra}
                            )
                    finally:
                        span.end(end_time=end)

    @property
    def span(self) -> Span:
        if self._span is None:
            raise RuntimeError("logical request is not open: use it as a context manager")
        return self._span

    @contained("LogicalRequest.attempt", fallback=_unnumbered_attempt, mark_result=True)
    def attempt(
        self,
        route: str,
        *,
        route_release: str | None = None,
        layer: Layer | str = Layer.HARNESS,
        route_priority: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
        name: str | None = None,
        hedge_ordinal: int | None = None,
        hedge_owner: Layer | str | None = None,
        breaker_state: BreakerState | str | None = None,
        breaker_generation: int = 0,
        lower: LowerLayerConfig | None = None,
    ) -> Attempt:
        """A new physical attempt on ``route``.

        Ordinals count per layer across the request (and per layer and route), so a harness's
        third try is ordinal 3 however many transport resends came before it. An attempt
        opened inside another attempt of this request records that one as its parent.

        ``hedge_ordinal`` makes it part of a hedge group (0 the primary, 1, 2, … hedges);
        ``breaker_state``/``breaker_generation`` stamp the route's circuit breaker at
        dispatch; ``lower`` declares the retry configuration of the layer below. A backoff
        announced with :meth:`schedule_backoff` in the same scope is recorded on it.
        """
        # Every argument is checked before an ordinal is allocated (a contained retry
        # without the invalid one must not skip an ordinal).
        if type(route) is not str:
            route = _text(route, "route")
        layer = layer if type(layer) is Layer else _member(Layer, layer, "layer", Layer.HARNESS)
        if type(route_priority) is not int:
            raise FieldError("route_priority", f"expected an int, got {route_priority!r:.40}", 0)
        if route_release is not None and type(route_release) is not str:
            route_release = _optional_text(route_release, "route_release")
        if name is not None and type(name) is not str:
            name = _optional_text(name, "name")
        given = (
            self._given_attributes(
                layer, attributes, hedge_ordinal, hedge_owner, breaker_state, breaker_generation
            )
            if attributes or hedge_ordinal is not None or breaker_state is not None
            else None
        )
        if lower is not None:
            given = {**(given or {}), **field_value("lower", lower.attributes)}  # type: ignore[dict-item]
        owner = otel_context.get_value(_SCOPE_KEY)  # (_parent_in, inline: the hot path)
        if type(owner) is _Handle:
            owner = owner()
        parent = owner if type(owner) is Attempt and owner.request is self else None
        if parent is not None and parent._ended:
            parent = _parent_in(self)
        sibling_key = _sibling_key(parent, layer)
        self._lock.acquire()  # (acquire/release: cheaper than ``with`` on the hot path)
        try:
            ordinal, route_ordinal, sibling = self._allocate_locked(
                sibling_key[2], (sibling_key[2], route), sibling_key
            )
            if self._pending:
                pending = self._pending.pop(parent.key if parent is not None else None, None)
            else:
                pending = None
        finally:
            self._lock.release()
        extra: dict[str, AttributeValue] = dict(pending) if pending else {}
        if given:
            extra.update(given)
        return Attempt(
            self,
            ordinal=ordinal,
            route_ordinal=route_ordinal,
            route=route,
            route_release=route_release,
            layer=layer,
            route_priority=route_priority,
            attributes=extra,
            parent=parent,
            sibling_ordinal=sibling,
            name=name,
            hedge_ordinal=hedge_ordinal,
        )

    def _given_attributes(
        self,
        layer: Layer,
        attributes: Mapping[str, AttributeValue] | None,
        hedge_ordinal: int | None,
        hedge_owner: Layer | str | None,
        breaker_state: BreakerState | str | None,
        breaker_generation: int,
    ) -> dict[str, AttributeValue]:
        """The attributes an attempt's arguments add (validated: FieldError names one)."""
        extra: dict[str, AttributeValue] = {}
        if attributes:
            extra.update(
                field_value(
                    "attributes", lambda: bound_attributes(attributes, self.max_string_bytes)
                )
                or {}
            )
        if hedge_ordinal is not None:
            _require_int(hedge_ordinal, "hedge_ordinal")
            owner = _member(Layer, hedge_owner or layer, "hedge_owner")
            extra[v.HEDGE_OWNER_KEY] = owner.value
        if breaker_state is not None:
            extra.update(_breaker_attributes(breaker_state, breaker_generation))
        return extra

    def send(
        self,
        route: str,
        evidence: SendEvidence,
        *,
        route_release: str | None = None,
        route_priority: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
        name: str | None = None,
        call_layer: Layer | None = None,
    ) -> Attempt:
        """A physical send a client integration makes: a transport attempt (not yet entered)
        placed among the operations of its parent attempt by ``evidence`` (see
        :mod:`~retryscope.instrumentation._sends`), so it is a resend only when it repeats
        an earlier send of its operation. Started inside a span taken for a send, it turns
        that span into a call and takes over its ordinals.

        ``call_layer``: the send goes through something that may send several times on its
        own (a retrying transport): once entered and registered with :meth:`send_opened`,
        a send starting beneath it turns it into a call whose sends are resends by that
        layer. Until then it is the send."""
        owner = otel_context.get_value(_SCOPE_KEY)  # (_parent_in, inline: the hot path)
        if type(owner) is _Handle:
            owner = owner()
        parent = owner if type(owner) is Attempt and owner.request is self else None
        if parent is not None and parent._ended:
            parent = _parent_in(self)
        if parent is not None and parent._may_be_call is not None:
            parent = parent.parent  # beneath such a send: a send of the same parent
        parent_key = parent.key if parent is not None else None
        parent_span_id = _span_id_in()
        sibling_key = _sibling_key(parent, _TRANSPORT)
        self._lock.acquire()
        try:
            place = self._sends.place(parent_key, parent_span_id, evidence)
            ordinal, route_ordinal, sibling = place.handover or self._allocate_locked(
                _TRANSPORT_VALUE, (_TRANSPORT_VALUE, route), sibling_key
            )
            pending = self._pending.pop(parent_key, None) if self._pending else None
        finally:
            self._lock.release()
        extra: dict[str, AttributeValue] = dict(pending) if pending else {}
        if attributes:
            extra.update(bound_attributes(attributes, self.max_string_bytes))
        _add_place_attributes(extra, place)
        attempt = Attempt(
            self,
            ordinal=ordinal,
            route_ordinal=route_ordinal,
            route=route,
            route_release=route_release,
            layer=_TRANSPORT,
            route_priority=route_priority,
            attributes=extra,
            parent=parent,
            sibling_ordinal=sibling,
            name=name,
            resend_count=place.resend_count,
            in_current_span=parent_span_id is not None,
        )
        attempt._operation = place.entry
        if call_layer is not None:
            attempt._may_be_call = (
                parent_key,
                place,
                (ordinal, route_ordinal, sibling),
                call_layer,
            )
            # not an open sibling of the sends beneath it (they are not overlapping sends)
            attempt._sibling_key = (*sibling_key[:2], _MAY_BE_CALL)
        return attempt

    @contained("LogicalRequest.send_opened")
    def send_opened(self, attempt: Attempt) -> None:
        """Register the entered ``attempt``, a :meth:`send` with ``call_layer``: a send
        starting beneath it now turns it into a call (until it closes)."""
        may_be_call, span = attempt._may_be_call, attempt._span
        if may_be_call is None or span is None:
            return
        parent_key, place, ordinals, call_layer = may_be_call
        with self._lock:
            self._sends.opened(
                span.get_span_context().span_id, span, parent_key, place, ordinals, call_layer
            )

    @contained("LogicalRequest.note_retry_after")
    def note_retry_after(self, delay_ms: int, *, at: int | None = None) -> None:
        """A send (or an attempt's error response) carried a Retry-After of ``delay_ms``
        received at ``at`` (unix ns; default now): the next attempt at any layer records the
        earliest start it asks for as its ``not_before``, so one that starts earlier is a
        ``not_before_ignored`` finding."""
        delay = _require_int(delay_ms, "delay_ms")
        received = _now(self.clock) if at is None else _require_int(at, "at")
        if delay is None or received is None or received + delay * 1_000_000 >= _INT64:
            raise FieldError("delay_ms", f"expected a delay in ms, got {delay_ms!r:.40}")
        with self._lock:
            self._sends.note_retry_after(received, delay)

    def _take_not_before(self) -> int | None:
        with self._lock:
            return self._sends.take_not_before()

    def _allocate_locked(
        self, layer: str, route_key: tuple[str, str], sibling_key: _SiblingKey
    ) -> tuple[int, int, int]:
        """Next (ordinal, route ordinal, sibling ordinal) of ``layer`` (a layer's value);
        hold ``_lock``. ``route_key`` is ``(layer, route)``, ``sibling_key``
        :func:`_sibling_key`."""
        if self._shared is not None:
            ordinal, route_ordinal, sibling = self._shared.next(
                (("o", layer), ("r", *route_key), ("s", *sibling_key))
            )
            return ordinal, route_ordinal, sibling
        ordinals, routes, siblings = self._ordinals, self._route_ordinals, self._siblings
        ordinal = ordinals[layer] = ordinals.get(layer, 0) + 1
        route_ordinal = routes[route_key] = routes.get(route_key, 0) + 1
        sibling = siblings[sibling_key] = siblings.get(sibling_key, 0) + 1
        return ordinal, route_ordinal, sibling

    def _open_sibling(self, attempt: Attempt) -> bool:
        """Register ``attempt`` as open; True when a non-hedge overlaps an open sibling."""
        key = attempt._sibling_key
        self._lock.acquire()
        try:
            open_now = self._open.get(key, 0)
            self._open[key] = open_now + 1
        finally:
            self._lock.release()
        overlapping = open_now > 0 and attempt.hedge_ordinal is None
        return overlapping

    @contained("LogicalRequest.schedule_backoff")
    def schedule_backoff(
        self,
        *,
        delay_ms: int | None = None,
        retry_after_ms: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        """Announce the wait before the next attempt opened in the current scope.

        Retry libraries decide the sleep after an attempt has ended; the next attempt of the
        same parent records it as its backoff (``delay_ms``) and the server hint the previous
        one received (``retry_after_ms``). Later announcements in the same scope add to it.
        """
        parent = _parent_in(self)
        attrs: dict[str, AttributeValue] = (
            field_value(
                "attributes", lambda: bound_attributes(attributes or {}, self.max_string_bytes)
            )
            or {}
        )
        if (d := _require_int(delay_ms, "delay_ms")) is not None:
            attrs[v.BACKOFF_DELAY_MS.key] = d
        if (r := _require_int(retry_after_ms, "retry_after_ms")) is not None:
            attrs[v.RETRY_AFTER_MS.key] = r
        key = parent.key if parent is not None else None
        with self._lock:
            self._pending.setdefault(key, {}).update(attrs)

    @contained("LogicalRequest.record_reconciliation")
    def record_reconciliation(
        self,
        result: ReconciliationResult | str,
        *,
        method: ReconciliationMethod | str,
        attempt: Attempt | None = None,
    ) -> None:
        """What the harness did after an indeterminate outcome, and what it found.

        Recorded as a ``retryscope.reconciliation`` event on the logical request span (one
        per reconciliation) and as the span's last reconciliation result, so the analytics
        can tell a reconciled retry from a blind one.
        """
        if attempt is not None and not isinstance(attempt, Attempt):
            raise FieldError("attempt", f"expected an Attempt, got {type(attempt).__name__}")
        res = ReconciliationResult(result)
        attrs: dict[str, AttributeValue] = {
            v.RECONCILIATION_RESULT.key: res.value,
            v.RECONCILIATION_METHOD_KEY: ReconciliationMethod(method).value,
        }
        if attempt is not None:
            attrs[v.RECONCILIATION_ATTEMPT_KEY] = attempt.ordinal
            attrs[v.RECONCILIATION_LAYER_KEY] = attempt.layer.value
        self.span.add_event(v.RECONCILIATION_EVENT, attrs, timestamp=_now(self.clock))
        self.span.set_attribute(v.RECONCILIATION_RESULT.key, res.value)

    @contained("LogicalRequest.transport_attempt_values", fallback=lambda *a, **k: ({}, 0))
    def transport_attempt_values(
        self,
        parent: Attempt | None,
        evidence: SendEvidence = NO_EVIDENCE,
        *,
        span: Span | None = None,
        span_id: int = 0,
        parent_context: otel_context.Context | None = None,
        call_layer: Layer | None = None,
        span_attributes: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, AttributeValue], int | None]:
        """Attributes that make a foreign span a send (a transport attempt) of this request,
        and the :func:`longest_string` of their values.

        Used by the stamping processor for HTTP client spans (opentelemetry-instrumentation-
        httpx, -requests, …) and known SDK call spans started inside an attempt: the span
        gets the next transport ordinal, its parent attempt, its operation and, when it
        repeats an earlier send of that operation, ``http.request.resend_count``
        (:class:`~._sends.SendLedger`). With ``span`` (and its ``span_id``) it is registered
        as open, so a send starting beneath it turns it into a call (``call_layer``: whose
        retries those sends are); ``parent_context`` is the context it started in;
        ``span_attributes`` its start attributes (those it is classified by are written
        again, see :data:`_CLASSIFIED_BY`). The part
        that is the same for every send under ``parent`` is built once per parent; each
        send adds only its ordinals.
        """
        return self._send_values(
            parent, evidence, span, span_id, parent_context, call_layer, span_attributes
        )

    def _send_values(
        self,
        parent: Attempt | None,
        evidence: SendEvidence,
        span: Span | None,
        span_id: int,
        parent_context: otel_context.Context | None,
        call_layer: Layer | None,
        span_attributes: Mapping[str, Any] | None,
    ) -> tuple[dict[str, AttributeValue], int | None]:
        """:meth:`transport_attempt_values` for a caller that contains its own failures
        (the stamping processor's ``on_start``, once per send; arguments by position)."""
        owner: Attempt | LogicalRequest = parent if parent is not None else self
        cached = owner._transport_base
        if cached is None:
            cached = owner._transport_base = self._transport_attempt_base(parent)
        base, tail, plain, longest, route_key, sibling_key, parent_key = cached
        sends = self._sends
        # Only an open send can make this one part of a call: with none open, its parent
        # span is not looked up. (A parent span registered as open was registered before
        # this span started, so an unlocked read sees it.)
        parent_span_id = _span_id_in(parent_context) if sends.open else None
        self._lock.acquire()
        try:
            place = sends.place(parent_key, parent_span_id, evidence)
            ordinals: Ordinals = place.handover or self._allocate_locked(
                _TRANSPORT_VALUE, route_key, sibling_key
            )
            if span is not None:
                sends.opened(span_id, span, parent_key, place, ordinals, call_layer)
            not_before = sends.take_not_before() if sends.not_before else None
        finally:
            self._lock.release()
        ordinal, route_ordinal, sibling = ordinals
        if (
            place.retry_layer is None
            and place.tries < 2
            and not place.resend_count
            and not_before is None
            and not span_attributes
        ):  # a plain send (the common case): its attributes in one copy, ordinals set
            attrs = plain[sibling > 1].copy()
            attrs[_K_ROUTE_ORDINAL] = route_ordinal
            if sibling > 1:
                attrs[_K_SIBLING] = sibling
            attrs[_K_OPERATION] = place.operation
            attrs[_K_ORDINAL] = ordinal
            return attrs, longest
        attrs = base.copy()
        attrs[_K_ROUTE_ORDINAL] = route_ordinal
        if sibling > 1:
            attrs[_K_SIBLING] = sibling
        if place.retry_layer is not None:
            attrs[_K_RETRY_LAYER] = str(place.retry_layer)
        if place.tries > 1:
            attrs[_K_OPERATION_TRY] = place.tries
        if place.resend_count:
            attrs[_K_RESEND] = place.resend_count
        if not_before is not None:
            attrs[_K_NOT_BEFORE] = not_before
        # last, in _JOIN_KEYS order: what the send is classified by (already on the span,
        # within its limits: ``longest`` need not cover it), then the join keys
        if span_attributes:
            for key in _CLASSIFIED_BY:
                if key in span_attributes:
                    attrs[key] = span_attributes[key]
                    break
        attrs[_K_OPERATION] = place.operation
        attrs[_K_ORDINAL] = ordinal
        attrs.update(tail)
        return attrs, longest

    @contained("LogicalRequest.send_ended")
    def send_ended(self, span_id: int, failed: bool | None = None) -> None:
        """A span registered by :meth:`transport_attempt_values` ended (no longer a parent
        that can turn into a call); ``failed``: it ended without success (None: unknown)."""
        self._send_closed(span_id, failed)

    def _send_closed(self, span_id: int, failed: bool | None) -> None:
        """:meth:`send_ended` for a caller that contains its own failures (the stamping
        processor's ``on_end``, once per send)."""
        self._lock.acquire()
        try:
            self._sends.closed(span_id, failed)
        finally:
            self._lock.release()

    def _parent_attributes(self, parent: Attempt | None) -> dict[str, AttributeValue]:
        """What an attempt of this request records of the attempt it is nested in:
        ``parent`` here, else (outermost in a continuation) the carried one elsewhere. An
        attempt is identified by (continuation, layer, ordinal), so the parent's
        continuation is named when it has one."""
        if parent is not None:
            layer: str = parent._layer_value
            ordinal, continuation = parent.ordinal, self.continuation
        elif self.carried_parent is not None:
            layer, ordinal, continuation = self.carried_parent
        else:
            return {}
        attrs: dict[str, AttributeValue] = {_K_PARENT_ORDINAL: ordinal, _K_PARENT_LAYER: layer}
        if continuation is not None:
            attrs[_K_PARENT_CONTINUATION] = continuation
        return attrs

    def _transport_attempt_base(self, parent: Attempt | None) -> _TransportBase:
        route = parent.route if parent is not None else "http"
        attrs: dict[str, AttributeValue] = dict(self.stamp)
        attrs[v.SPAN_ROLE.key] = SpanRole.ATTEMPT.value
        attrs[v.LAYER.key] = Layer.TRANSPORT.value
        attrs[v.ROUTE_ID.key] = route
        attrs.update(self._parent_attributes(parent))
        if parent is not None and parent.route_release is not None:
            attrs[v.ROUTE_RELEASE.key] = parent.route_release
        if self.retry_owner is not None:
            attrs[v.RETRY_OWNER.key] = self.retry_owner.value
        longest = longest_string(attrs)
        tail = {key: attrs.pop(key) for key in _JOIN_KEYS if key in attrs}
        ordinals = {_K_OPERATION: 0, _K_ORDINAL: 0}
        plain = (
            {**attrs, _K_ROUTE_ORDINAL: 0, **ordinals, **tail},
            {**attrs, _K_ROUTE_ORDINAL: 0, _K_SIBLING: 0, **ordinals, **tail},
        )
        return (
            attrs,
            tail,
            plain,
            longest,
            (Layer.TRANSPORT.value, route),
            _sibling_key(parent, Layer.TRANSPORT),
            parent.key if parent is not None else None,
        )

    @contained("LogicalRequest.ordinals", fallback=lambda *args, **kwargs: {})
    def ordinals(self) -> dict[Layer, int]:
        """Attempts allocated so far per layer (including those before a continuation)."""
        with self._lock:
            if self._shared is not None:
                counts = self._shared.counts().items()
                return {Layer(str(key[1])): n for key, n in counts if key[0] == "o"}
            return {Layer(layer): n for layer, n in self._ordinals.items()}

    @contained("LogicalRequest.set_terminal")
    def set_terminal(self, terminal: Terminal | str) -> None:
        """How the request ended; otherwise derived from its last attempt when it closes."""
        self.terminal = Terminal(terminal)

    @contained("LogicalRequest.remaining_ms")
    def remaining_ms(self) -> int | None:
        """Milliseconds until the deadline by this request's clock (negative when past)."""
        if self.deadline is None:
            return None
        return (self.deadline - self.clock()) // _NS_PER_MS

    def _attempt_closed(self, attempt: Attempt) -> None:
        """Record ``attempt`` as finished and no longer open (one lock round trip)."""
        self._lock.acquire()
        try:
            self.attempts.append(attempt)
            self._open[attempt._sibling_key] -= 1
            op = attempt._operation
            if op is not None:
                if attempt._may_be_call is not None and attempt._span is not None:
                    op = self._sends.closed(attempt._span.get_span_context().span_id) or op
                self._sends.ended(op, attempt.outcome is not Outcome.SUCCESS)
        finally:
            self._lock.release()

    def _derived_terminal(self, now: int) -> Terminal:
        counted = [a for a in self.attempts if a.hedge_result is not HedgeResult.CANCELLED]
        last = counted[-1] if counted else None
        if self.deadline is not None:
            succeeded = last is not None and last.outcome is Outcome.SUCCESS
            # A success completing at or after the deadline loses to the deadline.
            finished = (last.ended_at or now) if succeeded and last is not None else now
            if finished >= self.deadline:
                return Terminal.STOP_DEADLINE
        if last is None:
            return Terminal.STOP_ATTEMPT_BUDGET
        return {
            Outcome.SUCCESS: Terminal.COMPLETE,
            Outcome.NON_RETRYABLE: Terminal.STOP_NON_RETRYABLE,
            Outcome.INDETERMINATE: Terminal.STOP_INDETERMINATE,
        }.get(last.outcome or Outcome.INDETERMINATE, Terminal.STOP_ATTEMPT_BUDGET)

    @contained("LogicalRequest.count_prior_attempt")
    def count_prior_attempt(self, route: str, *, layer: Layer | str = Layer.HARNESS) -> None:
        """Count an attempt made before this process (e.g. recovered from a durable
        journal) so the ordinals of new attempts continue after it."""
        value = Layer(layer)._value_
        hash(route)  # an unhashable route fails here, before anything is counted
        with self._lock:
            if self._shared is not None:
                self._shared.next((("o", value), ("r", value, route)))
                return
            self._ordinals[value] = self._ordinals.get(value, 0) + 1
            self._route_ordinals[value, route] = self._route_ordinals.get((value, route), 0) + 1

    def _share_numbering(self) -> None:
        """From now on, number from counters shared with the children this process forks
        (see :mod:`._shared_numbering`)."""
        with self._lock:
            if self._shared is not None:
                return
            counts: dict[Key, int] = {("o", k): n for k, n in self._ordinals.items()}
            counts.update({("r", *k): n for k, n in self._route_ordinals.items()})
            counts.update({("s", *k): n for k, n in self._siblings.items()})
            for parent_key, n in self._sends.operation_counts().items():
                counts[_operation_key(parent_key)] = n
            shared = self._shared = SharedNumbering(counts)
            self._sends.numbering = lambda key: shared.next((_operation_key(key),))[0]

    def _over(self) -> bool:
        """Ended, here or, when this process was forked inside it, where it was opened."""
        if self._ended:
            return True
        shared = self._shared
        if shared is not None and shared.ended():
            self._ended = True
            return True
        return False

    def _forked(self) -> None:
        """In a child forked inside this request: its own lock (another thread may have
        held the parent's), and nothing of the parent's sends or announced backoff."""
        self._lock = threading.Lock()
        self._sends.forked()
        self._pending.clear()


def _operation_key(parent_key: ParentKey) -> Key:
    """The shared counter of operations under ``parent_key``."""
    return ("p",) if parent_key is None else ("p", parent_key[0]._value_, parent_key[1])


_forking: list[LogicalRequest] = []
"""The request a fork in progress shares its numbering with the child of."""


def _share_with_child() -> None:
    """Before a fork: the request of the forking thread's scope numbers across processes."""
    owner = live_owner(_owner_in())
    if owner is not None:
        request = owner.request if isinstance(owner, Attempt) else owner
        request._share_numbering()
        _forking.append(request)


def _in_child() -> None:
    for request in _forking:
        request._forked()
    _forking.clear()


at_fork(before=_share_with_child, after_in_parent=_forking.clear, after_in_child=_in_child)


def _tracer(provider: trace.TracerProvider | None) -> Tracer:
    from retryscope import __version__

    return trace.get_tracer(_TRACER_NAME, __version__, tracer_provider=provider)


def neutral_request(
    provider: Any = None,
    *,
    operation: Any = "unknown",
    clock: Any = time.time_ns,
    role: SpanRole = SpanRole.LOGICAL_REQUEST,
) -> LogicalRequest:
    """A request carrying nothing but its operation (``"unknown"`` unless a string), on the
    tracer of ``provider`` (the global one when that fails) and ``clock`` (the system
    clock unless callable): what a contained entry point answers when its arguments cannot
    be used, so the code under it still runs and its attempts are still recorded."""
    try:
        tracer = _tracer(provider)
    except Exception:
        tracer = _tracer(None)
    return LogicalRequest(
        tracer,
        operation=operation if isinstance(operation, str) else "unknown",
        tenant=None,
        idempotency_key=None,
        request=None,
        deadline=None,
        retry_owner=None,
        logical_request_id=None,
        policy_digest=None,
        clock=clock if callable(clock) else time.time_ns,
        attributes=None,
        role=role,
    )


def _degraded_request(*args: Any, operation: Any = "unknown", **kwargs: Any) -> LogicalRequest:
    """Fallback of a contained :func:`logical_request` that no single argument explains: a
    request with only its operation (any valid tracer), so the code under it still runs and
    its attempts are still recorded."""
    return neutral_request(kwargs.get("tracer_provider"), operation=operation)


@contained("logical_request", fallback=_degraded_request, mark_result=True)
def logical_request(
    *,
    operation: str,
    tenant: str | None = None,
    idempotency_key: str | None = None,
    request: Any = None,
    deadline: int | datetime | None = None,
    retry_owner: RetryOwner | str | None = RetryOwner.HARNESS,
    logical_request_id: str | None = None,
    policy_digest: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    clock: Clock = time.time_ns,
    attributes: Mapping[str, AttributeValue] | None = None,
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
) -> LogicalRequest:
    """Open a logical request: ``with logical_request(operation="chat", ...) as req:``.

    ``idempotency_key`` and ``request`` are digested at once and never stored raw.
    ``deadline`` is absolute (unix ns or an aware datetime) and is never reset per attempt.
    String attributes given to its attempts are bounded to ``max_string_bytes``.
    """
    tracer = field_value("tracer_provider", lambda: _tracer(tracer_provider))
    return LogicalRequest(
        tracer,  # type: ignore[arg-type]
        operation=operation,
        tenant=tenant,
        idempotency_key=idempotency_key,
        request=request,
        deadline=deadline,
        retry_owner=retry_owner,
        logical_request_id=logical_request_id,
        policy_digest=policy_digest,
        clock=clock,
        attributes=attributes,
        max_string_bytes=max_string_bytes,
    )
