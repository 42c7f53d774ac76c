"""Audit data sets made by the real pipeline for analytics tests.

A :class:`Recorder` wires a real ``TracerProvider`` with the ``AttemptStampingProcessor``
and a ``BatchSpanProcessor`` over the ``ParquetSpanExporter``; requests run through the
context API on a virtual clock (``clock=``) so every time, latency and deadline is exact.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryscope import vocabulary as v
from retryscope.analytics import AuditModel, connect
from retryscope.demo._scenarios import VirtualClock as Clock
from retryscope.instrumentation import (
    Attempt,
    AttemptMetricsProcessor,
    AttemptStampingProcessor,
    LogicalRequest,
    ParquetSpanExporter,
    logical_request,
)

MS = 1_000_000
T0 = 1_790_000_000_000_000_000  # 2026-09-21T14:13:20Z


class Recorder:
    """``metrics``: a live metrics processor for the stamping processor to hand spans to."""

    def __init__(self, directory: Path, metrics: AttemptMetricsProcessor | None = None) -> None:
        self.directory = directory
        self.exporter = ParquetSpanExporter(directory)
        self.provider = TracerProvider(resource=Resource.create({"service.name": "test"}))
        self.provider.add_span_processor(AttemptStampingProcessor(metrics=metrics))
        self.provider.add_span_processor(
            BatchSpanProcessor(self.exporter, max_queue_size=100_000, schedule_delay_millis=60_000)
        )
        self.tracer = self.provider.get_tracer("test-http")
        self._closed = False

    def request(self, clock: Clock, *, operation: str = "chat", **kwargs: Any) -> LogicalRequest:
        """``logical_request(...)`` on this provider and ``clock``."""
        return logical_request(
            operation=operation, tracer_provider=self.provider, clock=clock, **kwargs
        )

    def attempt(
        self,
        req: LogicalRequest,
        route: str = "primary",
        *,
        ms: float = 100.0,
        outcome: str = "success",
        decision: str | None = None,
        layer: str = "harness",
        priority: int = 0,
        release: str | None = None,
        reserved: int | None = None,
        actual: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        gap_ms: float = 0.0,
    ) -> Attempt:
        """One closed attempt lasting ``ms``; the clock then advances ``gap_ms``."""
        clock = req.clock
        assert isinstance(clock, Clock)
        with req.attempt(
            route,
            layer=layer,
            route_priority=priority,
            route_release=release,
            attributes=attributes,
        ) as a:
            clock.advance_ms(ms)
            if reserved is not None or actual is not None:
                a.set_cost(reserved=reserved, actual=actual)
            a.set_outcome(outcome)
            if decision is not None:
                a.set_decision(decision)
        clock.advance_ms(gap_ms)
        return a

    @contextmanager
    def http_span(
        self,
        clock: Clock,
        status: int | None,
        *,
        ms: float = 50.0,
        error: bool = False,
        url: str = "http://127.0.0.1/v1",
    ) -> Iterator[trace.Span]:
        """An HTTP client span as opentelemetry-instrumentation-httpx makes it (no retryscope
        role; the stamping processor adds the logical request); sends to one ``url`` repeat
        one request, sends to another are a distinct operation."""
        span = self.tracer.start_span(
            "POST",
            kind=trace.SpanKind.CLIENT,
            attributes={"http.request.method": "POST", "url.full": url},
            start_time=clock(),
        )
        with trace.use_span(span, end_on_exit=False):
            yield span
        clock.advance_ms(ms)
        if status is not None:
            span.set_attribute(v.HTTP_STATUS_CODE.key, status)
        if error or (status is not None and status >= 400):
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end(end_time=clock())

    @contextmanager
    def genai_span(self, clock: Clock, *, ms: float = 100.0) -> Iterator[trace.Span]:
        """A GenAI client span as an LLM SDK instrumentation makes it (model, tokens; no
        retryscope role: the stamping processor adds the logical request)."""
        span = self.tracer.start_span(
            "chat gpt-test",
            kind=trace.SpanKind.CLIENT,
            attributes={
                v.GEN_AI_OPERATION.key: "chat",
                v.GEN_AI_PROVIDER.key: "openai",
                v.GEN_AI_REQUEST_MODEL.key: "gpt-test",
                v.GEN_AI_RESPONSE_MODEL.key: "gpt-test-2026-09",
                v.GEN_AI_INPUT_TOKENS.key: 120,
                v.GEN_AI_OUTPUT_TOKENS.key: 48,
            },
            start_time=clock(),
        )
        with trace.use_span(span, end_on_exit=False):
            yield span
        clock.advance_ms(ms)
        span.end(end_time=clock())

    def telemetry_gap(self, clock: Clock, dropped: int, reason: str, *, ms: float = 1000) -> None:
        """A gap record as the exporter writes it (a span with the telemetry_gap role)."""
        span = self.tracer.start_span(
            "telemetry_gap",
            attributes={
                v.SPAN_ROLE.key: v.SpanRole.TELEMETRY_GAP.value,
                v.GAP_DROPPED_SPANS.key: dropped,
                v.GAP_REASON.key: reason,
            },
            start_time=clock(),
        )
        clock.advance_ms(ms)
        span.end(end_time=clock())

    def unfinished(self, req: LogicalRequest, body: Any) -> None:
        """Run ``body(req)`` inside ``req`` without ever ending the request span (a request
        whose terminal never reaches the data set), isolated in a copied context."""

        def run() -> None:
            req.__enter__()
            body(req)

        contextvars.copy_context().run(run)

    def connect(self) -> AuditModel:
        if not self._closed:
            self.provider.shutdown()
            self._closed = True
        con, dataset = connect(self.directory)
        assert not dataset.skipped
        return con
