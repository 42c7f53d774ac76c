"""``ParquetSpanExporter``: finished spans to Parquet files a reader can trust.

Use it behind the SDK's ``BatchSpanProcessor``. Batches are converted column by column into
Arrow and buffered; a file is written when the buffer reaches ``rows_per_file`` rows, when
it is ``max_age_s`` old, and on ``force_flush``/``shutdown``. Each file is written under a
hidden temporary name and renamed when complete, so a reader (DuckDB globbing
``**/*.parquet``) never sees a partial file. Rows are sorted by logical request id and start
time so a drill-down touches few row groups.

A failed write returns ``FAILURE`` and keeps the rows for the next try (bounded by
``max_buffered_rows``; what must be dropped is counted in :attr:`dropped_spans`).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from retryscope.instrumentation.columns import SpanColumns

_log = logging.getLogger(__name__)

TEMP_PREFIX: Final = "."
TEMP_SUFFIX: Final = ".inprogress"


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def spans_to_columns(spans: Sequence[ReadableSpan], cols: SpanColumns | None = None) -> SpanColumns:
    """Append finished SDK spans to ``cols`` (a new builder when None)."""
    cols = cols if cols is not None else SpanColumns()
    for span in spans:
        ctx = span.context
        if ctx is None:
            continue
        parent = span.parent
        scope = span.instrumentation_scope
        status = span.status
        cols.append(
            trace_id=_hex(ctx.trace_id, 32),
            span_id=_hex(ctx.span_id, 16),
            parent_span_id=_hex(parent.span_id, 16) if parent is not None else None,
            name=span.name,
            kind=span.kind.name,
            start_ns=span.start_time or 0,
            end_ns=span.end_time or span.start_time or 0,
            status_code=status.status_code.name,
            status_message=status.description,
            attributes=span.attributes,
            resource=span.resource.attributes if span.resource is not None else None,
            scope_name=scope.name if scope is not None else None,
            scope_version=scope.version if scope is not None else None,
            events=[(e.name, e.timestamp, e.attributes) for e in span.events],
            links=[
                (_hex(link.context.trace_id, 32), _hex(link.context.span_id, 16), link.attributes)
                for link in span.links
            ],
            dropped_attributes=span.dropped_attributes,
        )
    return cols


def sort_for_drilldown(table: pa.Table) -> pa.Table:
    """Rows ordered by logical request id, then start time (nulls last)."""
    if table.num_rows < 2:
        return table
    order = pc.sort_indices(
        table,
        sort_keys=[
            ("logical_request_id", "ascending", "at_end"),
            ("start_time", "ascending", "at_end"),
        ],
    )
    return table.take(order)


class ParquetSpanExporter(SpanExporter):
    """Writes finished spans as zstd Parquet files under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        rows_per_file: int = 200_000,
        max_age_s: float = 60.0,
        row_group_size: int = 100_000,
        compression: str = "zstd",
        max_buffered_rows: int = 1_000_000,
    ) -> None:
        if rows_per_file < 1 or row_group_size < 1 or max_buffered_rows < rows_per_file:
            raise ValueError(
                "rows_per_file and row_group_size must be >= 1 and "
                "max_buffered_rows >= rows_per_file"
            )
        self.directory = Path(directory)
        self.rows_per_file = rows_per_file
        self.max_age_s = max_age_s
        self.row_group_size = row_group_size
        self.compression = compression
        self.max_buffered_rows = max_buffered_rows
        self.dropped_spans = 0
        self.files_written: list[Path] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._host = socket.gethostname().replace(os.sep, "_") or "host"
        self._shutdown = False
        self._failing = False

    # -- SpanExporter ------------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        table = spans_to_columns(spans).to_table()
        with self._lock:
            self._buffer(table)
            due = self._pending_rows >= self.rows_per_file or (
                self._oldest is not None and time.monotonic() - self._oldest >= self.max_age_s
            )
            if due and not self._write_pending():
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            return self._write_pending()

    def shutdown(self) -> None:
        with self._lock:
            if not self._shutdown:
                self._write_pending()
                self._shutdown = True

    # -- internals ---------------------------------------------------------------------------
    def _buffer(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._oldest is None:
            self._oldest = time.monotonic()
        while self._pending_rows > self.max_buffered_rows and len(self._pending) > 1:
            dropped = self._pending.pop(0)
            self._pending_rows -= dropped.num_rows
            self.dropped_spans += dropped.num_rows
            _log.error("retryscope: buffer full, dropped %d spans", dropped.num_rows)

    def _write_pending(self) -> bool:
        if not self._pending:
            return True
        table = pa.concat_tables(self._pending)
        try:
            while table.num_rows:
                chunk = table.slice(0, self.rows_per_file)
                self._write_file(chunk)
                table = table.slice(chunk.num_rows)  # a later failure keeps only the rest
        except OSError as exc:
            self._pending = [table] if table.num_rows else []
            self._pending_rows = table.num_rows
            if not self._failing:
                _log.error(
                    "retryscope: cannot write spans to %s (%s); keeping %d spans to retry",
                    self.directory,
                    exc,
                    table.num_rows,
                )
            self._failing = True
            return False
        if self._failing:
            _log.warning("retryscope: writing to %s works again", self.directory)
        self._failing = False
        self._pending, self._pending_rows, self._oldest = [], 0, None
        return True

    def _write_file(self, table: pa.Table) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"spans-{stamp}-{self._host}-{os.getpid()}-{next(self._seq):06d}.parquet"
        final = self.directory / name
        temp = self.directory / f"{TEMP_PREFIX}{name}{TEMP_SUFFIX}"
        try:
            pq.write_table(
                sort_for_drilldown(table),
                temp,
                row_group_size=self.row_group_size,
                compression=self.compression,
            )
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self.files_written.append(final)
        return final
