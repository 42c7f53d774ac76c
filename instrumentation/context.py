"""The context API: one logical request, many physical attempts.

``logical_request(...)`` opens the logical request's span; ``req.attempt(...)`` opens one
child span per physical attempt and numbers it. Both put a :class:`Scope` into the
OpenTelemetry context under a private key (not Baggage, which propagators copy into
outgoing HTTP headers), so the :class:`~retryscope.instrumentation.processor.
AttemptStampingProcessor` can stamp every span started beneath them, in this thread, in
threads that copy the context, and in asyncio tasks.

Times come from an injectable ``clock`` (unix ns) so simulations and tests are exact.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from retryscope.instrumentation.classify import classify_exception, error_type
from retryscope.instrumentation.digests import idempotency_digest, request_digest

from retryscope import vocabulary as v
from retryscope.vocabulary import (
    Decision,
    Layer,
    Outcome,
    OutcomeKind,
    RetryOwner,
    SpanRole,
    Terminal,
)

Clock = Callable[[], int]
"""Returns the current time as unix nanoseconds."""

_SCOPE_KEY: Final = otel_context.create_key("retryscope-scope")
_TRACER_NAME: Final = "retryscope"
_NS_PER_MS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Scope:
    """The retryscope context of the code running now.

    ``stamp`` is computed once per request/attempt so the processor's ``on_start`` is a
    dictionary lookup and one ``set_attributes`` call.
    """

    stamp: Mapping[str, AttributeValue]
    request: LogicalRequest
    attempt: Attempt | None = None


def current_scope(ctx: otel_context.Context | None = None) -> Scope | None:
    """The scope active in ``ctx`` (default: the current context), or None."""
    value = otel_context.get_value(_SCOPE_KEY, ctx)
    return value if isinstance(value, Scope) else None


def _to_unix_ns(value: int | datetime | None, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{field}: datetime must be timezone-aware")
        return int(value.timestamp() * 1_000_000) * 1000
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field}: expected unix nanoseconds (int >= 0), got {value!r}")
    return value


def _require_int(value: int | None, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field}: expected an integer >= 0, got {value!r}")
    return value


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
    ) -> None:
        self.request = request
        self.parent = parent
        self.ordinal = ordinal
        self.route_ordinal = route_ordinal
        self.route = route
        self.route_release = route_release
        self.layer = layer
        self.route_priority = route_priority
        self.outcome: Outcome | None = None
        self.kind: OutcomeKind | None = None
        self.started_at: int | None = None
        self.ended_at: int | None = None
        self._extra = dict(attributes or {})
        self._span: Span | None = None
        self._token: object | None = None

    # -- span lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> Self:
        req = self.request
        now = req.clock()
        self.started_at = now
        attrs: dict[str, AttributeValue] = dict(req.stamp)
        attrs.update(self._extra)
        attrs[v.SPAN_ROLE.key] = SpanRole.ATTEMPT.value
        attrs[v.LAYER.key] = self.layer.value
        attrs[v.ATTEMPT_ORDINAL.key] = self.ordinal
        attrs[v.ROUTE_ATTEMPT_ORDINAL.key] = self.route_ordinal
        attrs[v.ROUTE_ID.key] = self.route
        attrs[v.ROUTE_PRIORITY.key] = self.route_priority
        attrs[v.FALLBACK.key] = self.route_priority > 0
        if self.route_release is not None:
            attrs[v.ROUTE_RELEASE.key] = self.route_release
        if self.parent is not None:
            attrs[v.PARENT_ATTEMPT_ORDINAL.key] = self.parent.ordinal
            attrs[v.PARENT_LAYER.key] = self.parent.layer.value
        if req.retry_owner is not None:
            attrs[v.RETRY_OWNER.key] = req.retry_owner.value
        if req.deadline is not None:
            attrs[v.DEADLINE.key] = req.deadline
            attrs[v.DEADLINE_REMAINING_MS.key] = (req.deadline - now) // _NS_PER_MS
        parent_span = self.parent.span if self.parent is not None else req.span
        parent = trace.set_span_in_context(parent_span, otel_context.get_current())
        self._span = req.tracer.start_span(
            f"attempt {self.route}",
            context=parent,
            kind=trace.SpanKind.CLIENT,
            attributes=attrs,
            start_time=now,
        )
        stamp = dict(req.stamp)
        stamp[v.ATTEMPT_ORDINAL.key] = self.ordinal
        stamp[v.ROUTE_ID.key] = self.route
        scope = Scope(MappingProxyType(stamp), req, self)
        ctx = otel_context.set_value(
            _SCOPE_KEY, scope, trace.set_span_in_context(self._span, parent)
        )
        self._token = otel_context.attach(ctx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self.span
        if exc is not None:
            span.record_exception(exc)
            if self.kind is None and self.outcome is None:
                self.set_outcome(classify_exception(exc), error=error_type(exc))
            else:
                span.set_attribute(v.ERROR_TYPE.key, error_type(exc))
        elif self.outcome is None:
            self.set_outcome(Outcome.SUCCESS)  # closed cleanly and unclassified: it worked
        if self.outcome is not None and self.outcome is not Outcome.SUCCESS:
            span.set_status(Status(StatusCode.ERROR, self.kind.value if self.kind else None))
        self.ended_at = self.request.clock()
        self.request._attempt_finished(self)
        try:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
        finally:
            span.end(end_time=self.ended_at)

    @property
    def span(self) -> Span:
        if self._span is None:
            raise RuntimeError("attempt is not open: use it as a context manager")
        return self._span

    # -- what the retry owner records -------------------------------------------------------
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

    def set_cost(
        self,
        *,
        reserved: int | None = None,
        actual: int | None = None,
        currency: str = "USD",
        estimated: bool | None = None,
    ) -> None:
        """Cost in integer micro-units. Without ``actual`` the reservation stands (estimated)."""
        attrs: dict[str, AttributeValue] = {v.COST_CURRENCY.key: currency}
        if (r := _require_int(reserved, "reserved")) is not None:
            attrs[v.COST_RESERVED.key] = r
        if (a := _require_int(actual, "actual")) is not None:
            attrs[v.COST_ACTUAL.key] = a
        attrs[v.COST_ESTIMATED.key] = (actual is None) if estimated is None else estimated
        self.span.set_attributes(attrs)

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
        """
        if kind is None and outcome not in Outcome.__members__.values():
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
        self.outcome, self.kind = family, kind
        attrs: dict[str, AttributeValue] = {v.OUTCOME.key: family.value}
        if kind is not None:
            attrs[v.OUTCOME_KIND.key] = kind.value
        if error is not None:
            attrs[v.ERROR_TYPE.key] = error
        elif kind is not None:
            attrs[v.ERROR_TYPE.key] = kind.value
        if http_status is not None:
            attrs[v.HTTP_STATUS_CODE.key] = http_status
        self.span.set_attributes(attrs)

    def set_decision(self, decision: Decision | str) -> None:
        """What the retry owner decided after this attempt."""
        self.span.set_attribute(v.DECISION.key, Decision(decision).value)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Any further attributes (e.g. ``gen_ai.*``) on the attempt span."""
        self.span.set_attributes(attributes)


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
    ) -> None:
        self.tracer = tracer
        self.clock = clock
        self.operation = operation
        self.tenant = tenant
        self.id = logical_request_id or uuid.uuid4().hex
        self.deadline = _to_unix_ns(deadline, "deadline")
        self.retry_owner = RetryOwner(retry_owner) if retry_owner is not None else None
        self.idempotency_digest = (
            idempotency_digest(tenant or "", operation, idempotency_key)
            if idempotency_key is not None
            else None
        )
        self.request_digest = request_digest(request) if request is not None else None
        self.policy_digest = policy_digest
        self.terminal: Terminal | None = None
        self.attempts: list[Attempt] = []
        self._extra = dict(attributes or {})
        self._lock = threading.Lock()
        self._ordinals: Counter[Layer] = Counter()
        self._route_ordinals: Counter[tuple[Layer, str]] = Counter()
        self._span: Span | None = None
        self._token: object | None = None
        stamp: dict[str, AttributeValue] = {
            v.LOGICAL_REQUEST_ID.key: self.id,
            v.OPERATION.key: operation,
        }
        if self.idempotency_digest is not None:
            stamp[v.IDEMPOTENCY_DIGEST.key] = self.idempotency_digest
        if tenant is not None:
            stamp[v.TENANT.key] = tenant
        if self.request_digest is not None:
            stamp[v.LOGICAL_REQUEST_DIGEST.key] = self.request_digest
        if policy_digest is not None:
            stamp[v.POLICY_DIGEST.key] = policy_digest
        self.stamp: Mapping[str, AttributeValue] = MappingProxyType(stamp)

    def __enter__(self) -> Self:
        attrs: dict[str, AttributeValue] = dict(self.stamp)
        attrs.update(self._extra)
        attrs[v.SPAN_ROLE.key] = SpanRole.LOGICAL_REQUEST.value
        if self.retry_owner is not None:
            attrs[v.RETRY_OWNER.key] = self.retry_owner.value
        if self.deadline is not None:
            attrs[v.DEADLINE.key] = self.deadline
        self._span = self.tracer.start_span(
            f"logical_request {self.operation}",
            attributes=attrs,
            start_time=self.clock(),
        )
        ctx = trace.set_span_in_context(self._span)
        ctx = otel_context.set_value(_SCOPE_KEY, Scope(self.stamp, self), ctx)
        self._token = otel_context.attach(ctx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self.span
        end = self.clock()
        if exc is not None:
            span.record_exception(exc)
            span.set_attribute(v.ERROR_TYPE.key, error_type(exc))
        terminal = self.terminal or self._derived_terminal(end)
        layer_counts = Counter(a.layer.value for a in self.attempts)
        span.set_attributes(
            {
                v.TERMINAL.key: terminal.value,
                v.ATTEMPT_COUNT.key: len(self.attempts),
                v.RETRIED_LAYERS.key: sorted(k for k, n in layer_counts.items() if n > 1),
            }
        )
        if terminal is not Terminal.COMPLETE:
            span.set_status(Status(StatusCode.ERROR, terminal.value))
        try:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
        finally:
            span.end(end_time=end)

    @property
    def span(self) -> Span:
        if self._span is None:
            raise RuntimeError("logical request is not open: use it as a context manager")
        return self._span

    def attempt(
        self,
        route: str,
        *,
        route_release: str | None = None,
        layer: Layer | str = Layer.HARNESS,
        route_priority: int = 0,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> Attempt:
        """A new physical attempt on ``route``.

        Ordinals count per layer across the request (and per layer and route), so a harness's
        third try is ordinal 3 however many transport resends came before it. An attempt
        opened inside another attempt of this request records that one as its parent.
        """
        layer = Layer(layer)
        scope = current_scope()
        parent = scope.attempt if scope is not None and scope.request is self else None
        with self._lock:
            self._ordinals[layer] += 1
            self._route_ordinals[layer, route] += 1
            ordinal = self._ordinals[layer]
            route_ordinal = self._route_ordinals[layer, route]
        return Attempt(
            self,
            ordinal=ordinal,
            route_ordinal=route_ordinal,
            route=route,
            route_release=route_release,
            layer=layer,
            route_priority=route_priority,
            attributes=attributes,
            parent=parent,
        )

    def set_terminal(self, terminal: Terminal | str) -> None:
        """How the request ended; otherwise derived from its last attempt when it closes."""
        self.terminal = Terminal(terminal)

    def remaining_ms(self) -> int | None:
        """Milliseconds until the deadline by this request's clock (negative when past)."""
        if self.deadline is None:
            return None
        return (self.deadline - self.clock()) // _NS_PER_MS

    def _attempt_finished(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    def _derived_terminal(self, now: int) -> Terminal:
        last = self.attempts[-1] if self.attempts else None
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

    def count_prior_attempt(self, route: str, *, layer: Layer | str = Layer.HARNESS) -> None:
        """Count an attempt made before this process (e.g. recovered from a durable
        journal) so the ordinals of new attempts continue after it."""
        layer = Layer(layer)
        with self._lock:
            self._ordinals[layer] += 1
            self._route_ordinals[layer, route] += 1


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
) -> LogicalRequest:
    """Open a logical request: ``with logical_request(operation="chat", ...) as req:``.

    ``idempotency_key`` and ``request`` are digested at once and never stored raw.
    ``deadline`` is absolute (unix ns or an aware datetime) and is never reset per attempt.
    """
    from retryscope import __version__

    tracer = trace.get_tracer(_TRACER_NAME, __version__, tracer_provider=tracer_provider)
    return LogicalRequest(
        tracer,
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
    )
