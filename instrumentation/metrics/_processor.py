"""``AttemptMetricsProcessor``: live metrics from the spans retryscope stamps.

A span processor beside the stamping one. It reads the retryscope attributes of finished
spans, so the live figures come from the same facts as the audit data set: each finished
attempt span's row is read from it (:func:`~._facts.attempt_row`: what the ended span
holds, whoever wrote it; a few spans at a time) and held until its logical request's span
ends; then the request's facts are computed (:func:`~._facts.request_facts`, the model's
definitions) and recorded, a few requests at a time and always before a reader collects.
Every other span costs one attribute lookup. The span-end path up to the held rows is
:class:`~._hold.Holder`, compiled with the facts where the install can: the SDK calls it
directly. Given to the stamping processor (``AttemptStampingProcessor(metrics=...)``, as the
``retryscope`` configurator wires it), it is called from that processor's ``on_end``
instead: the SDK then calls one processor per span, not two (:meth:`take_span_ends`).

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Histogram, MeterProvider, Observation
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope._fork import reset_in_child
from retryscope.instrumentation.metrics import _instruments as i
from retryscope.instrumentation.metrics._config import MetricsConfig
from retryscope.instrumentation.metrics._facts import AttemptRow, RequestFacts, request_facts, tally
from retryscope.instrumentation.metrics._hold import Holder
from retryscope.instrumentation.metrics._instruments import Dimension, Instrument, Kind
from retryscope.instrumentation.metrics._latency import RollingMedian
from retryscope.instrumentation.metrics._limits import Capped, Enumerated

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
        self._holder = Holder(
            self._record, self._record_evicted, self._failed, self.config.max_open_requests
        )
        self._lock = self._holder.lock
        self._open = self._holder.open
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
        # the SDK calls the compiled holder's on_end directly (no interpreter frame between;
        # ``on_start`` stays a method: the SDK passes its context by keyword, which the
        # interpreter's call takes for less than a compiled function's argument parsing)
        self.on_end = self._holder.on_end  # type: ignore[method-assign]
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

    def take_span_ends(self) -> Callable[[ReadableSpan], None] | None:
        """Hand the recording of ended spans to a processor that sees every span end (the
        stamping processor calls the returned function from its ``on_end``, so the SDK has
        one processor less to call on every span); None when switched off. From then on
        this processor's own ``on_end`` records nothing: added to the provider as well, it
        still counts each span once."""
        if not self._enabled:
            return None
        self.on_end = _ignore  # type: ignore[method-assign]
        return self._holder.on_end

    # -- SpanProcessor -----------------------------------------------------------------
    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self._holder.on_end(span)

    def shutdown(self) -> None:
        self.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Record every request that ended (figures wait for a few to end together)."""
        try:
            self._holder.flush()
        except Exception:  # never break the instrumented application
            self._failed("recording ended requests' metrics")
            return False
        return True

    def _after_fork(self) -> None:
        """In a forked child: the holder's fresh lock and no held rows, and counters that
        count what the child records (the parent reports its own totals)."""
        self._holder.after_fork()
        self._lock = self._holder.lock
        for series in self._totals.values():
            series.clear()
        self._evicted = 0

    def _record_evicted(self, attempts: list[AttemptRow]) -> None:
        """Record the attempts of a request evicted while open (past ``max_open_requests``)."""
        self._evicted += 1
        self._record(attempts, None)

    @property
    def evicted(self) -> int:
        """Requests recorded without their request-level figures: still open when more
        than ``max_open_requests`` were (the finished attempts not read yet are read first)."""
        self._holder.flush()
        return self._evicted

    # -- recording -----------------------------------------------------------------------
    def _record(self, attempts: list[AttemptRow], request: ReadableSpan | None) -> None:
        """Record one request's facts (``request`` None: its attempts only)."""
        facts = request_facts(attempts, request)
        samples: list[_Sample] = []
        with self._lock:
            extra = self._optional_values(facts)
            totals = self._totals

            def add(inst: Instrument, values: Values, amount: int = 1) -> None:
                series = totals[inst.name]
                key = values + extra if extra else values
                series[key] = series.get(key, 0) + amount

            self._attempt_figures(facts.attempts, add, samples)
            if request is not None:
                self._request_figures(facts, request, add, samples)
        for inst, value, values, span_context in samples:
            context = (
                trace.set_span_in_context(trace.NonRecordingSpan(span_context))
                if span_context is not None
                else None
            )
            attrs = self._attributes(inst.name, values + extra)
            self._histograms[inst.name].record(value, attrs, context=context)

    def _optional_values(self, facts: RequestFacts) -> Values:
        d = self._dim
        return tuple(
            d.tenant(facts.tenant) if o is Dimension.TENANT else d.operation(facts.operation)
            for o in self._optional
        )

    def _attempt_figures(
        self, rows: Sequence[AttemptRow], add: _Add, samples: list[_Sample]
    ) -> None:
        """The attempts' counts (summed per distinct attribute set, each set bounded once)
        and samples, the latency windows, then doomed dispatches. Holds the lock."""
        d = self._dim
        counted = tally(rows)
        places = {raw: (d.layer(raw[0]), d.route(raw[1])) for raw in counted.durations}
        for row in counted.extra:  # a cost, delay or not_before to record
            place = places[row.layer, row.route]
            if row.actual is not None or row.reserved is not None:
                spent = (d.currency(row.currency), place[1], not row.accepted)
                add(i.COST, (*spent, row.cost_is_estimate), row.cost_micros or 0)
            if row.violates_not_before:
                add(i.NOT_BEFORE_VIOLATIONS, place)
            if row.backoff_ms is not None:
                samples.append((i.BACKOFF_DELAY, row.backoff_ms, place, row.context))
            if row.retry_after_ms is not None:
                samples.append((i.RETRY_AFTER, row.retry_after_ms, place, row.context))
        for (layer, route, outcome, kind, owner, retry), n in counted.attempts.items():
            figure = (*places[layer, route], d.outcome(outcome), d.kind(kind), d.owner(owner))
            add(i.ATTEMPTS, (*figure, retry), n)
        for (layer, route, owner, resend), n in counted.sends.items():
            add(i.SENDS, (*places[layer, route], d.owner(owner), resend), n)
        latency, window_size = self._latency, self.config.latency_window
        for raw, values in counted.durations.items():
            place = places[raw]
            window = latency.get(place)
            if window is None:
                window = latency[place] = RollingMedian(window_size)
            window.extend(values)
        for raw, left in counted.remaining.items():
            doomed = latency[places[raw]].count_below(left)
            if doomed:
                add(i.DOOMED_DISPATCHES, places[raw], doomed)

    def _request_figures(
        self,
        facts: RequestFacts,
        request: ReadableSpan,
        add: _Add,
        samples: list[_Sample],
    ) -> None:
        """The figures of a request whose span ended here. Holds the lock."""
        d = self._dim
        terminal, owner = d.terminal(facts.terminal), d.owner(facts.retry_owner)
        add(i.LOGICAL_REQUESTS, (terminal, owner))
        if facts.operations:
            add(i.OPERATIONS, (terminal, owner), facts.operations)
        context = request.context
        samples.append((i.ATTEMPTS_PER_REQUEST, facts.receiver, (terminal, owner), context))
        if facts.nested_product is not None:
            samples.append((i.NESTED_RETRY_PRODUCT, facts.nested_product, (owner,), context))
        if facts.deadline_exhausted:
            add(i.DEADLINE_EXHAUSTED, (owner,))
        if facts.late_success:
            add(i.LATE_SUCCESSES, (owner,))
        fb = facts.fallback
        if fb is not None:
            quality = fb.quality.value if fb.quality is not None else None
            routes = (d.route(fb.from_route), d.route(fb.to_route))
            add(i.FALLBACKS, (*routes, fb.success, quality))
        widened = facts.widened_by
        if widened is not None:
            where = (d.route(widened.route), d.boundary(widened.route_boundary))
            add(i.BOUNDARY_WIDENED, where)

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
        """The cumulative totals of counter ``name``, for a reader's collection (the ended
        requests recorded first: the SDK runs these callbacks before it collects the
        histograms)."""
        try:
            self._holder.flush()
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

    def open_requests(self) -> int:
        """Requests whose attempts are held until their span ends."""
        self._holder.read_queued()
        with self._lock:
            return len(self._open)

    def attribute_keys(self, instrument: Instrument) -> tuple[str, ...]:
        """The attribute keys ``instrument`` carries under this configuration."""
        return self._keys[instrument.name]
