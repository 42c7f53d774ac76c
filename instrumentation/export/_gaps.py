"""Telemetry gaps: spans the pipeline knows it lost, kept as rows of the span data set.

A gap row has ``span_role = 'telemetry_gap'``, ``start_time``/``end_time`` = the window in
which the spans were lost, ``gap_dropped_spans`` = how many, and ``gap_reason`` = why. Its
``trace_id`` and ``span_id`` are all zeros (:data:`GAP_TRACE_ID`, :data:`GAP_SPAN_ID`): a gap
belongs to no trace. The analytics count lost spans with
``SELECT sum(gap_dropped_spans) FROM spans WHERE span_role = 'telemetry_gap'``.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.vocabulary import GAP_DROPPED_SPANS, GAP_REASON, SPAN_ROLE, SpanRole

GAP_TRACE_ID: Final = "0" * 32
GAP_SPAN_ID: Final = "0" * 16
GAP_SPAN_NAME: Final = "retryscope.telemetry_gap"
GAP_SCOPE: Final = "retryscope.instrumentation.export._gaps"


class GapReason(enum.StrEnum):
    """Why spans were lost."""

    BUFFER_FULL = "buffer_full"  # the exporter's retry buffer overflowed while writes failed
    QUEUE_OVERFLOW = "queue_overflow"  # BatchSpanProcessor's queue was full
    WRITE_FAILED = "write_failed"  # a batch could not be written at shutdown
    REJECTED = "rejected"  # a span the schema cannot hold (e.g. a time beyond int64 ns)


@dataclass(frozen=True, slots=True)
class Gap:
    reason: GapReason
    start_ns: int
    end_ns: int
    dropped: int


class GapLedger:
    """Thread-safe tally of lost spans per reason, drained into rows when a file is written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[GapReason, Gap] = {}

    def add(self, reason: GapReason, dropped: int, at_ns: int) -> None:
        if dropped > 0:
            self._merge(Gap(reason, at_ns, at_ns, dropped))

    def drain(self) -> list[Gap]:
        with self._lock:
            gaps = list(self._open.values())
            self._open.clear()
        return gaps

    def restore(self, gaps: list[Gap]) -> None:
        """Put back gaps whose rows could not be written."""
        for gap in gaps:
            self._merge(gap)

    def _merge(self, gap: Gap) -> None:
        with self._lock:
            old = self._open.get(gap.reason)
            self._open[gap.reason] = (
                gap
                if old is None
                else Gap(
                    gap.reason,
                    min(old.start_ns, gap.start_ns),
                    max(old.end_ns, gap.end_ns),
                    old.dropped + gap.dropped,
                )
            )

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(g.dropped for g in self._open.values())


def gap_table(gaps: list[Gap], resource: Mapping[str, Any] | None = None) -> pa.Table:
    """Rows of the span schema recording ``gaps`` (``resource``: the writer's resource)."""
    cols = SpanColumns()
    for gap in gaps:
        cols.append(
            trace_id=GAP_TRACE_ID,
            span_id=GAP_SPAN_ID,
            parent_span_id=None,
            name=GAP_SPAN_NAME,
            kind="INTERNAL",
            start_ns=gap.start_ns,
            end_ns=gap.end_ns,
            status_code="ERROR",
            status_message=f"{gap.dropped} spans lost: {gap.reason.value}",
            attributes={
                SPAN_ROLE.key: SpanRole.TELEMETRY_GAP.value,
                GAP_DROPPED_SPANS.key: gap.dropped,
                GAP_REASON.key: gap.reason.value,
            },
            resource=resource,
            scope_name=GAP_SCOPE,
            scope_version=None,
        )
    return cols.to_table()
