"""``GapCountingBatchSpanProcessor``: the SDK's ``BatchSpanProcessor`` that counts its drops.

When the SDK's batch queue is full, ``BatchSpanProcessor`` drops the span and only logs
"Queue full" (through a logger with a duplicate filter, so most drops are not even logged).
The one place every drop passes through is the processor's internal metrics hook
(``drop_items``), which the SDK calls once per dropped span whether or not SDK metrics are
enabled. This subclass wraps that hook, counts each drop exactly, and hands the count to the
exporter's :meth:`~retryscope.instrumentation.parquet_exporter.ParquetSpanExporter.record_gap`
(when the exporter has one), so the loss is persisted as a telemetry-gap row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from retryscope.instrumentation.gaps import GapReason

_log = logging.getLogger(__name__)

GapSink = Callable[[GapReason, int, int], None]


class _DropCounter:
    """Forwards the SDK's processor-metrics calls and counts dropped items."""

    def __init__(self, inner: Any, on_drop: Callable[[int, str], None]) -> None:
        self._inner = inner
        self._on_drop = on_drop

    def register_queue_size(self, get_queue_size: Callable[[], int]) -> None:
        self._inner.register_queue_size(get_queue_size)

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        self._on_drop(count, error_type)
        self._inner.drop_items(count, error_type)

    def finish_items(self, count: int) -> None:
        self._inner.finish_items(count)


class GapCountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` whose queue-overflow drops are counted and persisted.

    ``dropped_spans`` counts spans dropped because the queue was full; ``rejected_spans``
    those offered after shutdown. Queue-overflow drops go to ``span_exporter.record_gap``
    when the exporter has one (``ParquetSpanExporter`` does).
    """

    def __init__(self, span_exporter: SpanExporter, *args: Any, **kwargs: Any) -> None:
        super().__init__(span_exporter, *args, **kwargs)
        self.dropped_spans = 0
        self.rejected_spans = 0
        self._count_lock = threading.Lock()
        sink = getattr(span_exporter, "record_gap", None)
        self._sink: GapSink | None = sink if callable(sink) else None
        batch = getattr(self, "_batch_processor", None)
        metrics = getattr(batch, "_metrics", None)
        if batch is None or not callable(getattr(metrics, "drop_items", None)):
            _log.warning(
                "retryscope: this opentelemetry-sdk has no batch-processor drop hook; "
                "queue-overflow drops cannot be counted"
            )
            return
        batch._metrics = _DropCounter(metrics, self._on_drop)

    def _on_drop(self, count: int, error_type: str) -> None:
        with self._count_lock:
            if error_type == "already_shutdown":
                self.rejected_spans += count
                return
            self.dropped_spans += count
        if self._sink is not None:
            try:
                self._sink(GapReason.QUEUE_OVERFLOW, count, time.time_ns())
            except Exception:  # never break the application's span.end()
                _log.exception("retryscope: recording a queue-overflow gap failed")
