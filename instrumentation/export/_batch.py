"""``GapCountingBatchSpanProcessor``: the SDK's ``BatchSpanProcessor`` that counts its drops.

When its queue is full, the SDK's ``BatchSpanProcessor`` evicts the oldest queued span and
only logs "Queue full" (through a logger with a duplicate filter, so most drops are not even
logged). This subclass counts what is lost, on the SDK's public API only, and hands each
loss to the exporter's
:meth:`~retryscope.instrumentation.export._exporter.ParquetSpanExporter.record_gap` (when it
has one), so it is persisted as a telemetry-gap row: it counts the sampled spans it hands to
the SDK's processor and those that reach the exporter; when ``force_flush`` succeeds, every
span handed before it is either exported or lost, so the difference is counted then (a lower
bound while spans still end during the flush; exact at ``shutdown``). A gap's time is when
it was settled.

Its queue holds :data:`QUEUE_SIZE` spans (the SDK's default is 2,048) unless
``max_queue_size`` or ``OTEL_BSP_MAX_QUEUE_SIZE`` says otherwise. The queue is what carries
the application through a stall of the export thread: a Parquet file being cut (200,000
rows take seconds beside a busy thread), a CPU-bound application thread holding the GIL, the
operating system descheduling the process. At 5,000 spans/s the SDK's 2,048 last 0.4 s;
16,384 last 3.3 s. Memory stays bounded: a finished span of 20 attributes takes ≈ 3.3 KB,
so a full queue ≈ 54 MB (the queue is only that full while the exporter is behind: it is
exported from 512 spans on). The batch size (512) is the SDK's: a larger batch would hold
more spans in memory, not yet acknowledged, which a crash loses.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from opentelemetry.sdk.environment_variables import OTEL_BSP_MAX_QUEUE_SIZE
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from retryscope._fork import reset_in_child
from retryscope.instrumentation._containment import contained
from retryscope.instrumentation.export._gaps import GapReason

_log = logging.getLogger(__name__)

QUEUE_SIZE: Final = 16_384
"""Spans the queue holds when neither ``max_queue_size`` nor ``OTEL_BSP_MAX_QUEUE_SIZE`` is
given (see the module doc)."""


def queue_size(max_queue_size: int | None) -> int | None:
    """The queue size to hand the SDK's processor: ``max_queue_size``; else None (the SDK
    reads it) when ``OTEL_BSP_MAX_QUEUE_SIZE`` is set; else :data:`QUEUE_SIZE`."""
    if max_queue_size is not None or os.environ.get(OTEL_BSP_MAX_QUEUE_SIZE, "").strip():
        return max_queue_size
    return QUEUE_SIZE


def _false(*args: Any, **kwargs: Any) -> bool:
    return False


def _takes_timeout(method: Callable[..., Any]) -> bool:
    try:
        return "timeout_millis" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


class _Delivered(SpanExporter):
    """``exporter``, counting the spans handed to its ``export``."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.count = 0
        self._lock = threading.Lock()
        reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.count += len(spans)
        return self.exporter.export(spans)

    def shutdown(self, timeout_millis: float | None = None) -> None:
        # (the SDK passes a timeout to an exporter whose shutdown takes one: so does this)
        if timeout_millis is not None and _takes_timeout(self.exporter.shutdown):
            self.exporter.shutdown(timeout_millis=timeout_millis)  # type: ignore[call-arg]
        else:
            self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class GapCountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` whose queue-overflow drops are counted and persisted.

    ``dropped_spans`` counts spans lost because the queue was full; each loss is also
    handed to ``span_exporter.record_gap`` when the exporter has one (``ParquetSpanExporter``
    does). See the module doc for when a loss is counted, and for its queue's size. The other
    arguments are the SDK's.
    """

    def __init__(
        self,
        span_exporter: SpanExporter,
        max_queue_size: int | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        self._delivered = _Delivered(span_exporter)
        super().__init__(self._delivered, queue_size(max_queue_size), *args, **kwargs)
        self.dropped_spans = 0
        self._count_lock = threading.Lock()
        sink = getattr(span_exporter, "record_gap", None)
        self._sink: Callable[[GapReason, int, int], None] | None = sink if callable(sink) else None
        self._handed = 0  # sampled spans handed on
        self._closed = False
        reset_in_child(self._after_fork)

    @property
    def span_exporter(self) -> SpanExporter:
        return self._delivered.exporter

    @contained("GapCountingBatchSpanProcessor.on_end")
    def on_end(self, span: ReadableSpan) -> None:
        """Hand ``span`` on, then count it when the SDK's processor takes it (sampled, not
        shut down)."""
        context = span.context
        super().on_end(span)
        if context is not None and context.trace_flags.sampled and not self._closed:
            with self._count_lock:  # (after the hand-over: a settle never sees it in flight)
                self._handed += 1

    @contained("GapCountingBatchSpanProcessor.force_flush", fallback=_false)
    def force_flush(self, timeout_millis: int | None = None) -> bool:
        handed = self._handed
        flushed = super().force_flush(timeout_millis)
        if flushed:
            self._settle(handed)
        return flushed

    @contained("GapCountingBatchSpanProcessor.shutdown")
    def shutdown(self) -> None:
        self._closed = True
        if super().force_flush():
            self._settle(self._handed)  # before the exporter shuts down: gaps persist
        super().shutdown()  # type: ignore[no-untyped-call]
        if self.dropped_spans and self._sink is None:
            _log.warning(
                "retryscope: the batch queue dropped %d spans; this exporter cannot record "
                "them as telemetry gaps",
                self.dropped_spans,
            )

    def _settle(self, handed: int) -> None:
        """Count as lost the spans of the first ``handed`` that never reached the exporter."""
        with self._count_lock:
            lost = handed - self._delivered.count - self.dropped_spans
            if lost > 0:
                self.dropped_spans += lost
        if lost > 0:
            self._record(lost)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it at the fork);
        and the queue the SDK empties there held the parent's spans, which are not lost."""
        self._count_lock = threading.Lock()
        self._handed = self._delivered.count + self.dropped_spans

    def _record(self, count: int) -> None:
        """Hand ``count`` lost spans to the exporter's gap sink, if it has one."""
        if self._sink is not None:
            try:
                self._sink(GapReason.QUEUE_OVERFLOW, count, time.time_ns())
            except Exception:  # never break the application's span.end()
                _log.exception("retryscope: recording a queue-overflow gap failed")
