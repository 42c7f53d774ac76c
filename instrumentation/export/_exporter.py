"""``ParquetSpanExporter``: finished spans to Parquet files a reader can trust.

Use it behind the SDK's ``BatchSpanProcessor`` (better: :class:`GapCountingBatchSpanProcessor`,
which also records the spans that processor's full queue drops). Each batch is converted
column by column into Arrow and buffered; a file is cut when the buffer reaches
``rotate_rows`` rows or ``rotate_bytes`` bytes of Arrow data, when its oldest span is
``rotate_age_s`` old, and on ``force_flush``/``shutdown``. Files go to Hive partitions, are
sorted for drill-down, and appear atomically (see :mod:`._files`). Memory stays
bounded: about ``rotate_rows`` rows are buffered while writes succeed (those of the file
being cut and those that arrive meanwhile), ``buffer_rows`` while they fail.

While writes succeed, a file is cut by the exporter's helper thread, not by the ``export``
call that made it due: sorting and writing 200,000 rows takes seconds beside a busy
application thread, and an export that waited for it would stall the batch processor,
whose queue then overflows. ``export`` goes on buffering meanwhile (and appending to its
segment); nothing else writes until the cut is done. While writes fail, the ``export``
that finds a retry due writes itself, and returns whether it could.

A failed write (disk full, permission denied, read-only directory) returns ``FAILURE``,
logs the cause once per failure episode and keeps the rows in the bounded retry buffer,
which is written when the directory recovers. Rows that must be dropped are counted in
:attr:`ParquetSpanExporter.dropped_spans` and persisted as telemetry-gap rows
(:mod:`._gaps`) by the next successful write.

Without arguments the exporter reads ``RETRYSCOPE_PARQUET_*`` variables (:mod:`._config`),
which is how ``OTEL_TRACES_EXPORTER=retryscope_parquet`` constructs it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from retryscope._fork import reset_in_child
from retryscope.instrumentation._containment import contained
from retryscope.instrumentation._sdk import finished_attributes, finished_rows
from retryscope.instrumentation.export._columns import SpanColumns, attribute_shapes, shape_order
from retryscope.instrumentation.export._config import ExportConfig, Partitioning
from retryscope.instrumentation.export._files import (
    ARRIVAL,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    FileNamer,
    WriteError,
    sort_for_drilldown,
    write_partitioned,
)
from retryscope.instrumentation.export._gaps import (
    GAP_TRACE_ID,
    Gap,
    GapLedger,
    GapReason,
    gap_table,
)
from retryscope.instrumentation.export._scrub import scrub
from retryscope.instrumentation.export._segments import SegmentLog, recover
from retryscope.instrumentation.export._span_ids import hex_ids, span_id_column
from retryscope.schema import SPAN_SCHEMA
from retryscope.vocabulary import SpanRole

__all__ = [
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "ParquetSpanExporter",
    "sort_for_drilldown",
    "spans_to_columns",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


# keyed by id: enum members are singletons, and an enum's own __hash__ runs in Python
_KIND_NAMES: Final = {id(kind): kind.name for kind in SpanKind}
_STATUS_NAMES: Final = {id(code): code.name for code in StatusCode}


def _enum_names(members: Sequence[Any], names: Mapping[int, str]) -> list[str]:
    """The ``name`` of each enum member (looked up by id, else asked)."""
    found: list[str | None] = list(map(names.get, map(id, members)))
    if None in found:
        return [member.name for member in members]
    return cast(list[str], found)


_FIRST: Final = operator.itemgetter(0)
_DROPPED: Final = operator.attrgetter("dropped_attributes")
_TRACE_ID: Final = operator.attrgetter("trace_id")
_SPAN_ID: Final = operator.attrgetter("span_id")
_STATUS: Final = operator.attrgetter("status_code", "description")


def _status_columns(statuses: Sequence[Status]) -> tuple[Sequence[str], Sequence[str | None]]:
    """Status code names and descriptions, one per span (``statuses`` non-empty)."""
    codes, messages = zip(*map(_STATUS, statuses), strict=True)
    return _enum_names(codes, _STATUS_NAMES), messages


def _per_object(objects: Sequence[Any], read: Callable[[Any], _T]) -> list[_T]:
    """``read(o)`` for each object, called once per distinct object: spans share their
    resource and scope."""
    ids = list(map(id, objects))
    if ids and ids.count(ids[0]) == len(ids):  # one object (a process's resource)
        return [read(objects[0])] * len(ids)
    distinct = dict(zip(ids, objects, strict=True))
    memo = {key: read(o) for key, o in distinct.items()}
    return list(map(memo.__getitem__, ids))


def _resource_attributes(resource: Resource | None) -> Mapping[str, Any] | None:
    return resource.attributes if resource is not None else None


def _scope_fields(scope: InstrumentationScope | None) -> tuple[str | None, str | None]:
    return (scope.name, scope.version) if scope is not None else (None, None)


def _links_of(span_links: Sequence[Link]) -> list[tuple[str, str, Mapping[str, Any] | None]]:
    return [
        (
            format(link.context.trace_id, "032x"),
            format(link.context.span_id, "016x"),
            link.attributes,
        )
        for link in span_links
    ]


def spans_to_columns(spans: Sequence[ReadableSpan], cols: SpanColumns | None = None) -> SpanColumns:
    """Append finished SDK spans to ``cols`` (a new builder when None), column by column."""
    cols = cols if cols is not None else SpanColumns()
    _append_spans(spans, cols, by_shape=False)
    return cols


def spans_by_shape(spans: Sequence[ReadableSpan]) -> tuple[pa.Table, list[int] | None]:
    """The rows of ``spans`` (as :func:`spans_to_columns` makes them) with the spans of one
    attribute-key sequence next to each other, which saves putting routed attributes back
    in span order; and for each row, the position of its span among the spans converted
    (None: in span order)."""
    cols = SpanColumns()
    order = _append_spans(spans, cols, by_shape=True)
    return cols.to_table(), order


def _append_spans(
    spans: Sequence[ReadableSpan], cols: SpanColumns, *, by_shape: bool
) -> list[int] | None:
    """:func:`spans_to_columns`; ``by_shape``: grouped as :func:`spans_by_shape` says,
    returning the order (None: span order)."""
    rows = finished_rows(spans)
    if None in map(_FIRST, rows):  # a span without a context is skipped
        spans = [span for span, row in zip(spans, rows, strict=True) if row[0] is not None]
        rows = [row for row in rows if row[0] is not None]
    if not spans:
        return None
    attributes = list(map(finished_attributes, spans))
    order: list[int] | None = None
    shapes: list[tuple[str, ...]] | None = None
    if by_shape and len(spans) > 1:
        shapes = attribute_shapes(attributes)
        order = shape_order(shapes)
        if order is not None:
            regroup = operator.itemgetter(*order)
            rows, spans, attributes, shapes = (
                list(regroup(rows)),
                list(regroup(spans)),
                list(regroup(attributes)),
                list(regroup(shapes)),
            )
    (contexts, parents, names, kinds, starts, ends, statuses, resources, scopes, events, links) = (
        zip(*rows, strict=True)
    )
    del rows
    start_ns = [start or 0 for start in starts]
    status_codes, status_messages = _status_columns(statuses)
    has_parent = list(map(operator.is_not, parents, itertools.repeat(None)))
    parent_ids = [p.span_id for p in parents if p is not None]
    scope_names, scope_versions = zip(*_per_object(scopes, _scope_fields), strict=True)
    cols.extend(
        trace_id=hex_ids(list(map(_TRACE_ID, contexts)), 16),
        span_id=span_id_column(list(map(_SPAN_ID, contexts))),
        parent_span_id=span_id_column(parent_ids, has_parent),
        name=names,
        kind=_enum_names(kinds, _KIND_NAMES),
        start_ns=start_ns,
        end_ns=[end or start for end, start in zip(ends, start_ns, strict=True)],
        status_code=status_codes,
        status_message=status_messages,
        attributes=attributes,
        resource=_per_object(resources, _resource_attributes),
        scope_name=scope_names,
        scope_version=scope_versions,
        events=[[(e.name, e.timestamp, e.attributes) for e in one] if one else () for one in events]
        if any(events)
        else [()] * len(events),
        links=[_links_of(one) if one else () for one in links] if any(links) else [()] * len(links),
        dropped_attributes=list(map(_DROPPED, spans)),
        grouped_shapes=shapes,
    )
    return order


def _spans_only(table: pa.Table) -> pa.Table:
    """``table`` without its :data:`ARRIVAL` column."""
    return table.drop_columns([ARRIVAL]) if ARRIVAL in table.column_names else table


def _in_arrival_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in arrival order (to cut it between two rows by arrival)."""
    arrival = table.column(ARRIVAL)
    order = pc.sort_indices(arrival)
    if pc.all(pc.equal(order, pa.array(np.arange(len(order)), type=order.type))).as_py():
        return table
    return table.take(order)


def _cut_in_arrival_order(tables: list[pa.Table], cut: int) -> list[pa.Table]:
    """``tables`` (in arrival order one after another) with the one holding the ``cut``-th
    row put in arrival order, so that the first ``cut`` rows are the first that arrived."""
    out = list(tables)
    start = 0
    for index, table in enumerate(out):
        end = start + table.num_rows
        if start < cut < end:
            out[index] = _in_arrival_order(table)
            break
        start = end
    return out


_GAP_ARRIVALS: Final = 1 << 62
"""Where the arrival numbers of telemetry-gap rows start (span rows count from 0)."""


def _span_arrivals(tables: Sequence[pa.Table]) -> np.ndarray:
    """The arrival numbers of the span rows (not gap rows) of ``tables``."""
    parts = [t.column(ARRIVAL).to_numpy() for t in tables if t.num_rows]
    if not parts:
        return np.empty(0, dtype=np.int64)
    arrivals = np.concatenate(parts)
    return arrivals[arrivals < _GAP_ARRIVALS]


def _gap_rows_of(table: pa.Table) -> pa.Array:
    """Boolean mask of the telemetry-gap rows of ``table``."""
    return pc.fill_null(
        pc.and_(
            pc.equal(table.column("span_role"), SpanRole.TELEMETRY_GAP.value),
            pc.equal(table.column("trace_id"), GAP_TRACE_ID),
        ),
        False,
    )


def _gaps_of(table: pa.Table) -> list[Gap]:
    """The gaps recorded by telemetry-gap rows (to put back when they were not written)."""
    reasons = table.column("gap_reason").to_pylist()
    starts = pc.cast(table.column("start_time"), pa.int64()).to_pylist()
    ends = pc.cast(table.column("end_time"), pa.int64()).to_pylist()
    counts = table.column("gap_dropped_spans").to_pylist()
    return [
        Gap(GapReason(reason), start, end, count)
        for reason, start, end, count in zip(reasons, starts, ends, counts, strict=True)
        if count
    ]


class ParquetSpanExporter(SpanExporter):
    """Writes finished spans as zstd Parquet files under a directory (see the module doc).

    ``directory`` and the keyword arguments (named as the :class:`ExportConfig` fields)
    override ``config``; ``config`` defaults to :meth:`ExportConfig.from_env`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        config: ExportConfig | None = None,
        partitioning: Partitioning | str | None = None,
        rotate_rows: int | None = None,
        rotate_bytes: int | None = None,
        rotate_age_s: float | None = None,
        row_group_rows: int | None = None,
        buffer_rows: int | None = None,
        retry_s: float | None = None,
        compression: str | None = None,
        file_mode: int | None = None,
        dir_mode: int | None = None,
        durable: bool | None = None,
        fsync_s: float | None = None,
        keep_content: bool | None = None,
    ) -> None:
        base = config if config is not None else ExportConfig.from_env()
        self.config = base.with_overrides(
            directory=Path(directory) if directory is not None else None,
            partitioning=Partitioning(partitioning) if partitioning is not None else None,
            rotate_rows=rotate_rows,
            rotate_bytes=rotate_bytes,
            rotate_age_s=rotate_age_s,
            row_group_rows=row_group_rows,
            buffer_rows=buffer_rows,
            retry_s=retry_s,
            compression=compression,
            file_mode=file_mode,
            dir_mode=dir_mode,
            durable=durable,
            fsync_s=fsync_s,
            keep_content=keep_content,
        )
        self.directory = self.config.directory
        self.dropped_spans = 0
        """Spans this exporter lost (retry buffer overflow, unwritable at shutdown)."""
        self.withheld_content = 0
        """Prompt and completion values written as the redaction mark (:mod:`._content`)."""
        self.files_written: collections.deque[Path] = collections.deque(maxlen=1024)
        """The most recent files written (the last 1024)."""
        self.gaps = GapLedger()
        self._pending: list[pa.Table] = []  # span rows, each with its ARRIVAL number
        self._arrived = 0  # rows numbered so far
        self._gap_arrived = _GAP_ARRIVALS  # gap rows are numbered apart (never in a segment)
        self._pending_rows = 0
        self._pending_bytes = 0
        self._oldest: float | None = None
        self._resource: Mapping[str, Any] | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a cut ends
        self._cutting = False  # the helper thread is writing files (without the lock)
        self._cut = threading.Event()  # wakes the helper thread: a file is due
        self._namer = FileNamer("spans")
        self._segments = SegmentLog(self.config, self._namer) if self.config.durable else None
        self._cleaned: set[Path] = set()  # directories rid of dead writers' temporary files
        self._shutdown = False
        self._failing = False
        self._next_retry = 0.0
        self._episode_start_dropped = 0
        self._wake = threading.Event()
        self._ager: threading.Thread | None = None
        # pyarrow imports pandas on its first conversion: pay that here, not in the export
        # thread, where a busy application thread can stretch the import to many seconds
        # while the span queue overflows
        SpanColumns().to_table()
        self._ager_pid = 0
        reset_in_child(self._reset_after_fork)
        if self.config.durable:
            self._recover_left_behind()

    # -- SpanExporter ------------------------------------------------------------------------
    @contained("ParquetSpanExporter.export", fallback=lambda *a, **k: SpanExportResult.FAILURE)
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        return self._export(spans)

    def _export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        order: list[int] | None = None
        try:
            table, order = spans_by_shape(spans)
        except Exception:  # a span the schema cannot hold: keep the others, count it
            table = self._convert_one_by_one(spans)
        table, withheld = scrub(table, keep_content=self.config.keep_content)
        self.withheld_content += withheld
        resource = getattr(spans[-1], "resource", None) if spans else None
        if resource is not None:
            self._resource = resource.attributes
        with self._lock:
            if table.num_rows:
                table = self._with_arrival(table, order)
                self._log_segment(table)
                self._buffer(table)
            self._ensure_ager()
            if not self._due():
                return SpanExportResult.SUCCESS
            if self._failing and time.monotonic() < self._next_retry:
                return SpanExportResult.FAILURE
            if self._cutting or not self._failing:
                self._cut.set()  # the helper thread cuts the file (see the module doc)
                return SpanExportResult.SUCCESS
            ok = self._write_pending(deadline=None, whole_files=not self._due(by_rows=False))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    @contained("ParquetSpanExporter.force_flush", fallback=lambda *a, **k: False)
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._lock.acquire(timeout=max(0.0, timeout_millis / 1000)):
            return False
        try:
            if not self._wait_for_cut(deadline):
                return False
            return self._write_pending(deadline=deadline)
        finally:
            self._lock.release()

    @contained("ParquetSpanExporter.shutdown")
    def shutdown(self, timeout_millis: float = 30000) -> None:
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._lock.acquire(timeout=max(0.0, timeout_millis / 1000)):
            _log.error("retryscope: shutdown timed out waiting for a write in progress")
            self._shutdown = True
            self._wake.set()
            return
        try:
            if self._shutdown:
                return
            self._shutdown = True
            self._wake.set()
            self._cut.set()
            if not self._wait_for_cut(deadline) or not self._write_pending(deadline=deadline):
                kept = self._segments.durable if self._segments is not None else 0
                lost = self._pending_rows - kept
                self.dropped_spans += lost
                gap_lost = self.gaps.pending
                self._clear_pending()
                self.gaps.drain()
                _log.error(
                    "retryscope: shutting down with %d spans that could not be written under "
                    "%s: %d are kept in its segments (written by `retryscope recover` or the "
                    "next exporter there), %d (and a gap record of %d lost spans) are lost",
                    kept + lost,
                    self.directory,
                    kept,
                    lost,
                    gap_lost,
                )
            if self._segments is not None:
                self._segments.close()
        finally:
            self._lock.release()

    @contained("ParquetSpanExporter.record_gap")
    def record_gap(self, reason: GapReason, dropped: int, at_ns: int | None = None) -> None:
        """Count ``dropped`` spans lost elsewhere (e.g. a full queue); written as a gap row."""
        self.gaps.add(reason, dropped, time.time_ns() if at_ns is None else at_ns)

    # -- internals ---------------------------------------------------------------------------
    def _wait_for_cut(self, deadline: float) -> bool:
        """Under the lock: wait until no cut is in progress; False when ``deadline`` (a
        ``time.monotonic()`` value) passed first."""
        while self._cutting:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._idle.wait(remaining):
                return not self._cutting
        return True

    def _convert_one_by_one(self, spans: Sequence[ReadableSpan]) -> pa.Table:
        """The batch without the spans that cannot be converted (each counted as rejected),
        so one bad span never costs the batch it arrived in."""
        good: list[pa.Table] = []
        first_error: Exception | None = None
        for span in spans:
            try:
                good.append(spans_to_columns([span]).to_table())
            except Exception as exc:
                first_error = first_error or exc
        rejected = len(spans) - len(good)
        if rejected:
            self._lose(rejected, GapReason.REJECTED, f"cannot convert span: {first_error!r}")
        return pa.concat_tables(good) if good else SPAN_SCHEMA.empty_table()

    def _lose(self, count: int, reason: GapReason, why: str) -> None:
        self.dropped_spans += count
        self.record_gap(reason, count)
        _log.error("retryscope: lost %d spans (%s)", count, why)

    def _due(self, *, by_rows: bool = True) -> bool:
        return (
            (by_rows and self._pending_rows >= self.config.rotate_rows)
            or self._pending_bytes >= self.config.rotate_bytes
            or (
                self._oldest is not None
                and time.monotonic() - self._oldest >= self.config.rotate_age_s
            )
        )

    def _with_arrival(
        self, table: pa.Table, order: Sequence[int] | None = None, *, gaps: bool = False
    ) -> pa.Table:
        """``table`` with its rows' arrival numbers (:data:`ARRIVAL`): the next ones, in
        row order or, for rows not in arrival order, by ``order`` (each row's position).
        Telemetry-gap rows (``gaps``) are numbered apart from span rows."""
        if ARRIVAL in table.column_names:
            return table
        n = table.num_rows
        positions = np.arange(n) if order is None else np.asarray(order, dtype=np.int64)
        base = self._gap_arrived if gaps else self._arrived
        arrival = pa.array(positions + base, type=pa.int64())
        if gaps:
            self._gap_arrived += n
        else:
            self._arrived += n
        return table.append_column(ARRIVAL, arrival)

    def _log_segment(self, table: pa.Table) -> None:
        """Append the batch to its segment before it counts as accepted. When the disk
        refuses, or while a failure episode waits to retry, the batch is kept in memory
        only, as without segments (the episode is the files' and the segments' alike: one
        log line, one retry schedule)."""
        if self._segments is None:
            return
        if self._failing and time.monotonic() < self._next_retry:
            self._segments.skip(table)
            return
        try:
            self._segments.append(table)
        except (OSError, pa.ArrowException) as exc:
            self._disk_failed(exc)

    def _done(self, tables: Sequence[pa.Table], keep: pa.Table | None = None) -> None:
        """The span rows of ``tables`` but those of ``keep`` are in Parquet or counted lost:
        their segments may go."""
        if self._segments is None or not tables:
            return
        arrivals = _span_arrivals(tables)
        if keep is not None and keep.num_rows:
            arrivals = np.setdiff1d(arrivals, _span_arrivals([keep]), assume_unique=True)
        self._segments.done(arrivals)

    def _recover_left_behind(self) -> None:
        """Write as Parquet what dead writers left in segments under this directory."""
        try:
            found = recover(self.directory, self.config)
        except Exception as exc:  # never stop the application from starting
            _log.error("retryscope: recovering segments under %s failed: %s", self.directory, exc)
            return
        if found.segments or found.failed:
            _log.warning("retryscope: under %s, %s", self.directory, found.summary())
        for problem in found.problems():
            _log.warning("retryscope: segment %s", problem)
        for line in found.kept():
            _log.debug("retryscope: segment %s", line)

    def _buffer(self, table: pa.Table, order: Sequence[int] | None = None) -> None:
        if table.num_rows == 0:
            return
        # the size of its buffers: as ``nbytes`` for a freshly built table, at a fraction of
        # the cost (``nbytes`` looks for shared buffer ranges); the arrival numbers not counted
        size = _spans_only(table).get_total_buffer_size()
        table = self._with_arrival(table, order)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += size
        if self._oldest is None:
            self._oldest = time.monotonic()
        excess = self._pending_rows - self.config.buffer_rows
        if excess <= 0:
            return
        dropped = 0
        lost: list[pa.Table] = []
        while excess > 0:
            first = self._pending[0]
            if first.num_rows <= excess:
                self._pending.pop(0)
                taken = first.num_rows
                self._pending_bytes -= _spans_only(first).nbytes
                lost.append(first)
            else:
                first = _in_arrival_order(first)
                rest = first.slice(excess)
                self._pending[0] = rest
                taken = excess
                self._pending_bytes -= _spans_only(first).nbytes - _spans_only(rest).nbytes
                lost.append(first.slice(0, excess))
            excess -= taken
            dropped += taken
        self._done(lost)
        self._pending_rows -= dropped
        self.dropped_spans += dropped
        self.record_gap(GapReason.BUFFER_FULL, dropped)

    def _clear_pending(self) -> None:
        self._pending, self._pending_rows, self._pending_bytes, self._oldest = [], 0, 0, None

    def _write_pending(
        self, deadline: float | None, *, whole_files: bool = False, unlocked: bool = False
    ) -> bool:
        """Write everything buffered (and the pending gap rows); False if rows remain.

        Full files come first, each of the ``rotate_rows`` rows that arrived first.
        ``whole_files``: write only full files and keep the remainder buffered (a cut by row
        count then yields files of exactly that size). ``unlocked``: the helper thread's cut,
        which lets go of the lock while it writes each file (``export`` buffers meanwhile;
        nothing else writes: ``_cutting``).
        """
        rotate = self.config.rotate_rows
        while self._pending_rows > rotate:
            if not self._write_rows(deadline, rotate, unlocked=unlocked):
                return False
        if whole_files and self._pending_rows < rotate:
            return True
        return self._write_rows(deadline, None, unlocked=unlocked)

    def _write_rows(self, deadline: float | None, rows: int | None, *, unlocked: bool) -> bool:
        """Write the first ``rows`` rows to arrive (None: all) and the pending gap rows;
        False if they were not all written (kept, or counted lost)."""
        oldest = self._oldest
        gaps = self.gaps.drain()
        tables = list(self._pending)
        tail: pa.Table | None = None
        if rows is not None and 0 < rows < self._pending_rows:
            spans = pa.concat_tables(_cut_in_arrival_order(tables, rows))
            tables, tail = [spans.slice(0, rows)], spans.slice(rows)
        spans_written = list(tables)
        if gaps:
            gap_rows, _ = scrub(gap_table(gaps, self._resource))  # the resource is the user's
            tables.append(self._with_arrival(gap_rows, gaps=True))
        if not tables:
            return True
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        self._clear_pending()  # what arrives from here on is buffered behind the tail
        if tail is not None:
            self._buffer(tail)
        if unlocked:
            self._cutting = True
            self._lock.release()
        try:
            written = write_partitioned(
                table, self.config, self._namer, deadline=deadline, cleaned=self._cleaned
            )
        except WriteError as exc:
            self._relock(unlocked)
            self.files_written.extend(exc.written)
            self._done(spans_written, keep=exc.remaining)
            self._keep_unwritten(exc.remaining, oldest)
            if isinstance(exc.cause, TimeoutError):
                return False
            self._disk_failed(exc)
            return False
        except Exception as exc:  # not an I/O problem: these rows can never be written
            self._relock(unlocked)
            self._done(spans_written)
            self._lose(table.num_rows - len(gaps), GapReason.WRITE_FAILED, f"write raised {exc!r}")
            self.gaps.restore(gaps)
            return False
        except BaseException:
            self._relock(unlocked)
            raise
        self._relock(unlocked)
        self.files_written.extend(written)
        self._done(spans_written)
        if self._failing:
            self._failing = False
            _log.info(
                "retryscope: writing under %s works again; %d spans lost during the failure",
                self.directory,
                self.dropped_spans - self._episode_start_dropped,
            )
        return True

    def _relock(self, unlocked: bool) -> None:
        """After a cut's write (``unlocked``): take the lock back, wake who waits for it."""
        if unlocked:
            self._lock.acquire()
            self._cutting = False
            self._idle.notify_all()

    def _disk_failed(self, exc: BaseException) -> None:
        """A write (of a file or a segment) failed: a failure episode starts (logged once)
        or goes on, and the next write waits ``retry_s``."""
        self._next_retry = time.monotonic() + self.config.retry_s
        if not self._failing:
            self._failing = True
            self._episode_start_dropped = self.dropped_spans
            _log.error(
                "retryscope: cannot write spans under %s (%s); keeping up to %d spans "
                "in memory and retrying",
                self.directory,
                exc,
                self.config.buffer_rows,
            )

    def _keep_unwritten(self, remaining: pa.Table, oldest: float | None) -> None:
        """Put the rows a write left (``oldest``: when the first of them was buffered) back
        in front of what was buffered since; their gap rows back into the ledger."""
        is_gap = _gap_rows_of(remaining)
        self.gaps.restore(_gaps_of(remaining.filter(is_gap)))
        spans = remaining.filter(pc.invert(is_gap))
        if spans.num_rows:
            self._pending.insert(0, self._with_arrival(spans))
            self._pending_rows += spans.num_rows
            self._pending_bytes += _spans_only(spans).nbytes
            times = [t for t in (oldest, self._oldest) if t is not None]
            self._oldest = min(times) if times else time.monotonic()

    # -- age-based rotation while no new spans arrive ------------------------------------------
    def _ensure_ager(self) -> None:
        if self._ager is not None and self._ager_pid == os.getpid() and self._ager.is_alive():
            return
        self._ager_pid = os.getpid()
        self._ager = threading.Thread(
            target=_age_loop, args=(weakref.ref(self),), name="retryscope-parquet-age", daemon=True
        )
        self._ager.start()

    def _cut_if_due(self) -> None:
        """The helper thread's turn: ``fsync`` the segment when due, and cut the file when it
        is (by rows, bytes or age), writing without the lock."""
        with self._lock:
            if self._shutdown or self._oldest is None or self._cutting:
                return
            if self._segments is not None:
                self._segments.sync(due_only=True)
            if self._due() and not (self._failing and time.monotonic() < self._next_retry):
                self._write_pending(
                    deadline=None, whole_files=not self._due(by_rows=False), unlocked=True
                )

    def _reset_after_fork(self) -> None:
        """In a forked child: a new writer. The parent writes what it buffered and counted;
        the child starts with fresh locks, no buffer, its own file names and no helper
        thread (started again on its first export)."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._cutting = False
        self._cut = threading.Event()
        self._clear_pending()
        self.gaps = GapLedger()
        self._namer = FileNamer("spans")
        if self._segments is not None:
            self._segments.forget_after_fork()
            self._segments = SegmentLog(self.config, self._namer)
        self._wake = threading.Event()
        self._ager = None
        self.dropped_spans = 0
        self.files_written.clear()


def _age_loop(ref: weakref.ref[ParquetSpanExporter]) -> None:
    """The helper thread: cuts a file when ``export`` says one is due, or when the oldest
    buffered span is ``rotate_age_s`` old while no span arrives; ``fsync``s the segment."""
    while True:
        exporter = ref()
        if exporter is None or exporter._shutdown:
            return
        wake, cut = exporter._wake, exporter._cut
        period = min(1.0, exporter.config.rotate_age_s / 2)
        del exporter
        cut.wait(period)
        if wake.is_set():
            return
        cut.clear()
        exporter = ref()
        if exporter is None:
            return
        try:
            exporter._cut_if_due()
        except Exception:  # never let the helper thread die noisily
            _log.exception("retryscope: cutting a file in the helper thread failed")
        del exporter
