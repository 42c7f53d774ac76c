"""``GapCountingBatchSpanProcessor``: the SDK's ``BatchSpanProcessor`` that counts its drops.

When its queue is full, the SDK's ``BatchSpanProcessor`` evicts the oldest queued span and
only logs "Queue full" (through a logger with a duplicate filter, so most drops are not even
logged; its internal drop metric also counts a drop when the worker happens to free a slot
between the check and the insert). This subclass gives the processor a queue that counts
what it really evicts: insertion and removal hold one lock, so a span is counted lost
exactly when the bounded deque pushes one out. Each loss goes to the exporter's
:meth:`~retryscope.instrumentation.export._exporter.ParquetSpanExporter.record_gap` (when it
has one), so it is persisted as a telemetry-gap row.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from retryscope.instrumentation.export._gaps import GapReason

_log = logging.getLogger(__name__)


class _EvictionCountingDeque(collections.deque[Any]):
    """A bounded deque whose ``appendleft`` reports each item it pushes out of the far end."""

    def __init__(self, maxlen: int, on_evict: Callable[[int], None]) -> None:
        super().__init__((), maxlen)
        self._guard = threading.Lock()
        self._on_evict = on_evict

    def appendleft(self, item: Any) -> None:
        with self._guard:
            evicts = self.maxlen is not None and len(self) >= self.maxlen
            super().appendleft(item)
        if evicts:
            self._on_evict(1)

    def pop(self) -> Any:  # type: ignore[override]  # deque.pop takes no index
        with self._guard:
            return super().pop()


class GapCountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` whose queue-overflow drops are counted and persisted.

    ``dropped_spans`` counts spans lost because the queue was full; each loss is also
    handed to ``span_exporter.record_gap`` when the exporter has one (``ParquetSpanExporter``
    does).
    """

    def __init__(self, span_exporter: SpanExporter, *args: Any, **kwargs: Any) -> None:
        super().__init__(span_exporter, *args, **kwargs)
        self.dropped_spans = 0
        self._count_lock = threading.Lock()
        sink = getattr(span_exporter, "record_gap", None)
        self._sink: Callable[[GapReason, int, int], None] | None = sink if callable(sink) else None
        batch = getattr(self, "_batch_processor", None)
        queue = getattr(batch, "_queue", None)
        if not isinstance(queue, collections.deque) or queue.maxlen is None:
            _log.warning(
                "retryscope: this opentelemetry-sdk's batch processor has no bounded deque; "
                "queue-overflow drops cannot be counted"
            )
            return
        counting = _EvictionCountingDeque(queue.maxlen, self._on_evict)
        counting.extend(queue)  # empty at construction; same order (newest first) if not
        batch._queue = counting  # type: ignore[union-attr]

    def _on_evict(self, count: int) -> None:
        with self._count_lock:
            self.dropped_spans += count
        if self._sink is not None:
            try:
                self._sink(GapReason.QUEUE_OVERFLOW, count, time.time_ns())
            except Exception:  # never break the application's span.end()
                _log.exception("retryscope: recording a queue-overflow gap failed")

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[no-untyped-call]
        if self.dropped_spans and self._sink is None:
            _log.warning(
                "retryscope: the batch queue dropped %d spans; this exporter cannot record "
                "them as telemetry gaps",
                self.dropped_spans,
            )
