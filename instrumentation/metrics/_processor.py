"""``AttemptMetricsProcessor``: live metrics of what the recorder stamped on the spans.

A span processor beside the stamping one. Each attempt span that ends is counted into its
logical request's :class:`~._tally.RequestTally` (its own values, and the place the recorder
gave it); when the request's span ends, the tally's :class:`~._tally.Figures` are recorded.
Every other span costs one attribute lookup. Given to the stamping processor
(``AttemptStampingProcessor(metrics=...)``, as the ``retryscope`` configurator wires it), it
is called from that processor's ``on_start``/``on_end`` instead: the SDK then calls one
processor per span, not two (:meth:`take_span_ends`).

Counters are kept as cumulative totals here and reported through observable counters when
a reader collects (a few dict increments per request instead of one SDK measurement per
figure); the distributions are the SDK's histograms, recorded in the context of the
request (or attempt) span, so exemplars carry its trace and span id. Attribute values are
bounded (:mod:`._limits`). A continuation's attempts, and those of a request still open
when more than ``max_open_requests`` are, are recorded without the request-level figures.

It never raises into the application: failures are counted in
:attr:`AttemptMetricsProcessor.errors` and logged once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Histogram, MeterProvider, Observation
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope._fork import reset_in_child
from retryscope.instrumentation._context import _SCOPE_KEY, Attempt, _Handle, open_scopes
from retryscope.instrumentation._open_sends import Sent
from retryscope.instrumentation._sdk import ended_fields, finished_attributes, raw_attributes
from retryscope.instrumentation.metrics import _instruments as i
from retryscope.instrumentation.metrics._config import MetricsConfig
from retryscope.instrumentation.metrics._instruments import Dimension, Instrument, Kind
from retryscope.instrumentation.metrics._latency import RollingMedian
from retryscope.instrumentation.metrics._limits import Capped, Enumerated
from retryscope.instrumentation.metrics._tally import Figures, RequestTally

_log = logging.getLogger(__name__)
METER_NAME: Final = "retryscope"

Values = tuple[AttributeValue | None, ...]
"""An instrument's attribute values in the order of its keys (None: not set)."""
_Sample = tuple[Instrument, int, Values, SpanContext | None]
"""A histogram value to record: instrument, value, attribute values, exemplar span."""


def _ignore(span: ReadableSpan) -> None:
    """``on_end`` of a disabled processor."""


class _Add(Protocol):
    """Adds ``amount`` to an instrument's series (see ``AttemptMetricsProcessor._record``)."""

    def __call__(self, inst: Instrument, values: Values, amount: int = 1) -> None: ...


@dataclass(slots=True)
class _Dimensions:
    """The bounded value of each attribute the instruments carry."""

    layer: Enumerated
    outcome: Enumerated
    kind: Enumerated
    owner: Enumerated
    terminal: Enumerated
    boundary: Enumerated
    route: Capped
    currency: Capped
    tenant: Capped
    operation: Capped

    @classmethod
    def bounded(cls, limit: int) -> _Dimensions:
        return cls(
            Enumerated(v.Layer),
            Enumerated(v.Outcome),
            Enumerated(v.OutcomeKind),
            Enumerated(v.RetryOwner),
            Enumerated(v.Terminal),
            Enumerated(v.DataBoundary),
            Capped(limit),
            Capped(limit),
            Capped(limit),
            Capped(limit),
        )


_ROLE: Final = v.SPAN_ROLE.key
_ID: Final = v.LOGICAL_REQUEST_ID.key
_PARENT_LAYER: Final = v.PARENT_LAYER.key
_ORDINAL: Final = v.ATTEMPT_ORDINAL.key
_OPERATION: Final = v.OPERATION_ORDINAL.key
_ATTEMPT: Final = v.SpanRole.ATTEMPT.value
_REQUEST: Final = v.SpanRole.LOGICAL_REQUEST.value
_CONTINUATION: Final = v.SpanRole.CONTINUATION.value
_SAMPLED: Final = {"backoff": i.BACKOFF_DELAY, "retry_after": i.RETRY_AFTER}
_get_current: Final = otel_context.get_current


class AttemptMetricsProcessor(SpanProcessor):
    """Records the instruments of :data:`~._instruments.INSTRUMENTS` from finished spans.

    ``meter_provider`` defaults to the global one (instruments made before the SDK sets it
    are bound when it does); ``config`` defaults to :meth:`MetricsConfig.from_env`. With
    ``config.enabled`` False it creates no instrument and records nothing.
    """

    def __init__(
        self,
        *,
        meter_provider: MeterProvider | None = None,
        config: MetricsConfig | None = None,
    ) -> None:
        self.config = config if config is not None else MetricsConfig.from_env()
        self.errors = 0
        """Spans or collections whose recording failed (contained, logged once)."""
        self._evicted = 0
        self._enabled = self.config.enabled
        self._max_open = self.config.max_open_requests
        self._lock = threading.Lock()
        self._open: dict[str, RequestTally] = {}
        """The tally of each request with an attempt ended and its span not yet."""
        self._enclosing: dict[int, tuple[Any, Any]] = {}
        """Open attempt spans that name no enclosing attempt but started in one's span."""
        reset_in_child(self._after_fork)
        self._totals: dict[str, dict[Values, int]] = {}
        self._series: dict[tuple[str, Values], dict[str, AttributeValue]] = {}
        self._latency: dict[tuple[str | None, str | None], RollingMedian] = {}
        self._histograms: dict[str, Histogram] = {}
        self._dim = _Dimensions.bounded(self.config.max_values)
        self._optional = tuple(d for d in Dimension if d in self.config.dimensions)
        self._keys = {
            inst.name: inst.attributes + tuple(d.key for d in self._optional)
            for inst in i.INSTRUMENTS
        }
        if not self._enabled:
            self.on_end = _ignore  # type: ignore[method-assign]
            return
        self.on_end = self._ended  # type: ignore[method-assign]
        from retryscope import __version__

        meter = metrics.get_meter(METER_NAME, __version__, meter_provider=meter_provider)
        for inst in i.INSTRUMENTS:
            if inst.kind is Kind.COUNTER:
                self._totals[inst.name] = {}
                meter.create_observable_counter(
                    inst.name,
                    callbacks=[partial(self._observe, inst.name)],
                    unit=inst.unit,
                    description=inst.description,
                )
            else:
                self._histograms[inst.name] = meter.create_histogram(
                    inst.name,
                    unit=inst.unit,
                    description=inst.description,
                    explicit_bucket_boundaries_advisory=list(inst.buckets),
                )

    def take_span_ends(
        self,
    ) -> Callable[[ReadableSpan, Sent | None, Mapping[str, Any] | None, int], None] | None:
        """Hand the recording of ended spans to a processor that sees every span end (the
        stamping processor calls the returned function from its ``on_end``, and
        :meth:`attempt_started` from its ``on_start``, so the SDK has one processor less to
        call on every span); None when switched off. From then on this processor's own
        ``on_end`` records nothing: added to the provider as well, it still counts each
        span once."""
        if not self._enabled:
            return None
        self.on_end = _ignore  # type: ignore[method-assign]
        return self._ended

    # -- SpanProcessor -----------------------------------------------------------------
    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        try:
            ctx = parent_context if parent_context is not None else _get_current()
            owner = ctx.get(_SCOPE_KEY)
            if type(owner) is _Handle:
                owner = owner()  # (the scope, held weakly)
            if type(owner) is Attempt and self._enabled:
                attributes = raw_attributes(span)
                if attributes:
                    self.attempt_started(span, attributes, owner, ctx)
        except Exception:  # never break the instrumented application
            self._failed("reading a span's start")

    def on_end(self, span: ReadableSpan) -> None:
        self._ended(span)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing waits: each request is recorded when its span ends."""
        return True

    def attempt_started(
        self,
        span: Span,
        attributes: Mapping[str, Any],
        owner: Attempt,
        ctx: otel_context.Context,
    ) -> None:
        """A span that already has a role started inside ``owner`` (``ctx``: its parent
        context): an attempt span of the same request that names no enclosing attempt,
        started in ``owner``'s own span, is counted as beneath ``owner`` (as the model nests
        it under its parent span's attempt)."""
        if (
            attributes.get(_ROLE) == _ATTEMPT
            and attributes.get(_PARENT_LAYER) is None
            and attributes.get(_ID) == owner.request.id
            and trace.get_current_span(ctx) is owner.span
        ):
            enclosing = self._enclosing
            if len(enclosing) >= self._max_open:  # spans that never end: the oldest goes
                enclosing.pop(next(iter(enclosing)), None)
            enclosing[span.get_span_context().span_id] = (owner.layer.value, owner.ordinal)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it at the fork),
        no open request, and counters that count what the child records (the parent reports
        its own totals)."""
        self._lock = threading.Lock()
        self._open.clear()
        self._enclosing.clear()
        for series in self._totals.values():
            series.clear()
        self._evicted = 0

    @property
    def evicted(self) -> int:
        """Requests recorded without their request-level figures: still open when more
        than ``max_open_requests`` were."""
        return self._evicted

    def open_requests(self) -> int:
        """Requests with an attempt counted whose span has not ended."""
        with self._lock:
            return len(self._open)

    # -- counting ------------------------------------------------------------------------
    def _ended(
        self,
        span: ReadableSpan,
        sent: Sent | None = None,
        attributes: Mapping[str, Any] | None = None,
        span_id: int = 0,
    ) -> None:
        """Count an ended attempt span into its request's tally; record an ended request.
        For a send the stamping processor made of it: ``sent``, its request id, enclosing
        attempt and stamped place (then its place is the recorder's, not read again), its
        ``attributes`` as that processor read them at its end, and its ``span_id``."""
        try:
            found = attributes if attributes is not None else finished_attributes(span)
            if not found:
                return
            role = found.get(_ROLE)
            if role is None:
                return
            attrs = found if type(found) is dict else dict(found)
            if role == _ATTEMPT:
                ended = ended_fields(span)
                if sent is not None and sent[3]:
                    request_id: Any = sent[0]
                    enclosing = None
                else:
                    request_id = attrs.get(_ID)
                    if type(request_id) is not str:
                        return
                    sent = None
                    span_id = ended[0].span_id if ended[0] is not None else 0
                    enclosing = self._enclosing.pop(span_id, None) if self._enclosing else None
                evicted = None
                lock = self._lock
                lock.acquire()
                try:
                    tally = self._open.get(request_id)
                    if tally is None:
                        if len(self._open) >= self._max_open:
                            evicted = self._open.pop(next(iter(self._open)))
                        tally = self._open[request_id] = RequestTally()
                    tally.add(attrs, ended, enclosing, sent, span_id)
                finally:
                    lock.release()
                if evicted is not None:
                    self._evicted += 1
                    try:
                        self._record_evicted(evicted)
                    except Exception:  # the ending span was counted: only this one is lost
                        self._failed("recording an evicted request's metrics")
            elif role in (_REQUEST, _CONTINUATION):
                request_id = attrs.get(_ID)
                if type(request_id) is not str:
                    return
                with self._lock:
                    if open_scopes(request_id):  # a continuation of it still open here
                        if role == _REQUEST:
                            tally = self._open.get(request_id)
                            if tally is None:
                                tally = self._open[request_id] = RequestTally()
                            tally.request_end = (attrs, span.context)
                        return
                    tally = self._open.pop(request_id, None)
                if role == _REQUEST:
                    self._record((tally or RequestTally()).ended(attrs), span.context)
                elif tally is not None:
                    self._record_evicted(tally)
        except Exception:  # never break the instrumented application
            self._failed("recording a span's metrics")

    # -- recording -----------------------------------------------------------------------
    def _record_evicted(self, tally: RequestTally) -> None:
        """Record a request's attempts without its span: evicted while open (past
        ``max_open_requests``), or ended by its last continuation here (with the request's
        own figures when its span ended here before)."""
        request, context = tally.request_end or (None, None)
        self._record(tally.ended(request), context)

    def _record(self, figures: Figures, context: SpanContext | None) -> None:
        """Record one request's figures (its request-level ones when ``figures.request``;
        ``context``: the request span's, for the exemplars)."""
        samples: list[_Sample] = []
        with self._lock:
            extra = self._optional_values(figures)
            totals = self._totals

            def add(inst: Instrument, values: Values, amount: int = 1) -> None:
                if amount:
                    series = totals[inst.name]
                    key = values + extra if extra else values
                    series[key] = series.get(key, 0) + amount

            self._attempt_figures(figures, add, samples)
            if figures.request:
                self._request_figures(figures, context, add, samples)
        for inst, value, values, span_context in samples:
            parent = (
                trace.set_span_in_context(trace.NonRecordingSpan(span_context))
                if span_context is not None
                else None
            )
            attrs = self._attributes(inst.name, values + extra)
            self._histograms[inst.name].record(value, attrs, context=parent)

    def _optional_values(self, figures: Figures) -> Values:
        d = self._dim
        return tuple(
            d.tenant(figures.tenant) if o is Dimension.TENANT else d.operation(figures.operation)
            for o in self._optional
        )

    def _attempt_figures(self, figures: Figures, add: _Add, samples: list[_Sample]) -> None:
        """The attempts' counts and samples, the latency windows, then doomed dispatches.
        Holds the lock."""
        d = self._dim
        places = {raw: (d.layer(raw[0]), d.route(raw[1])) for raw in figures.durations}
        for currency, route, accepted, estimated, micros in figures.costs:
            wasted = not (accepted and figures.complete)
            add(i.COST, (d.currency(currency), d.route(route), wasted, estimated), micros)
        for raw, n in figures.violations.items():
            add(i.NOT_BEFORE_VIOLATIONS, places[raw], n)
        for name, value, raw, span_context in figures.samples:
            samples.append((_SAMPLED[name], value, places[raw], span_context))
        for (layer, route, outcome, kind, owner, retry), n in figures.attempts.items():
            figure = (*places[layer, route], d.outcome(outcome), d.kind(kind), d.owner(owner))
            add(i.ATTEMPTS, (*figure, retry), n)
        for (layer, route, owner, resend), n in figures.sends.items():
            add(i.SENDS, (*places[layer, route], d.owner(owner), resend), n)
        latency, window_size = self._latency, self.config.latency_window
        for raw, values in figures.durations.items():
            place = places[raw]
            window = latency.get(place)
            if window is None:
                window = latency[place] = RollingMedian(window_size)
            window.extend(values)
        for raw, left in figures.remaining.items():
            add(i.DOOMED_DISPATCHES, places[raw], latency[places[raw]].count_below(left))

    def _request_figures(
        self,
        figures: Figures,
        context: SpanContext | None,
        add: _Add,
        samples: list[_Sample],
    ) -> None:
        """The figures of a request whose span ended here. Holds the lock."""
        d = self._dim
        terminal, owner = d.terminal(figures.terminal), d.owner(figures.retry_owner)
        add(i.LOGICAL_REQUESTS, (terminal, owner))
        add(i.OPERATIONS, (terminal, owner), figures.operations)
        samples.append((i.ATTEMPTS_PER_REQUEST, figures.receiver, (terminal, owner), context))
        if figures.nested_product is not None:
            samples.append((i.NESTED_RETRY_PRODUCT, figures.nested_product, (owner,), context))
        if figures.deadline_exhausted:
            add(i.DEADLINE_EXHAUSTED, (owner,))
        if figures.late_success:
            add(i.LATE_SUCCESSES, (owner,))
        fb = figures.fallback
        if fb is not None:
            routes = (d.route(fb.from_route), d.route(fb.to_route))
            add(i.FALLBACKS, (*routes, fb.success, fb.quality))
        if figures.widened is not None:
            route, boundary = figures.widened
            add(i.BOUNDARY_WIDENED, (d.route(route), d.boundary(boundary)))

    def _attributes(self, name: str, values: Values) -> dict[str, AttributeValue]:
        """The attribute mapping of one series (kept: series are few and recur)."""
        key = (name, values)
        attrs = self._series.get(key)
        if attrs is None:
            attrs = {
                k: val for k, val in zip(self._keys[name], values, strict=True) if val is not None
            }
            self._series[key] = attrs
        return attrs

    def _observe(self, name: str, options: CallbackOptions) -> Iterable[Observation]:
        """The cumulative totals of counter ``name``, for a reader's collection."""
        try:
            with self._lock:
                series = list(self._totals[name].items())
            return [Observation(total, self._attributes(name, values)) for values, total in series]
        except Exception:  # a reader's collection must not fail on retryscope
            self._failed("reporting a counter")
            return []

    def _failed(self, what: str) -> None:
        self.errors += 1
        if self.errors == 1:
            _log.exception("retryscope: %s failed (further failures counted)", what)

    def attribute_keys(self, instrument: Instrument) -> tuple[str, ...]:
        """The attribute keys ``instrument`` carries under this configuration."""
        return self._keys[instrument.name]
