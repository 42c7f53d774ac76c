"""The exporter groups each batch's spans by attribute-key sequence: routing then needs no
put-back, and the arrival number of each row keeps every file exactly as arrival order
would have made it (rows equal in request id and start time stay in arrival order, a file
cut by row count takes the rows that arrived first, a full buffer drops the oldest)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from retryscope import ParquetSpanExporter
from retryscope.instrumentation.export._columns import attribute_shapes, route_attributes
from retryscope.instrumentation.export._exporter import spans_by_shape, spans_to_columns
from retryscope.instrumentation.export._files import ARRIVAL

from .test_columns_routing import _batches

T0 = 1_790_000_000_000_000_000


@settings(max_examples=150, deadline=None)
@given(batch=_batches(), seed=st.integers(0, 2**16))
def test_routing_run_by_run_equals_routing_by_groups(
    batch: list[dict[str, Any]], seed: int
) -> None:
    """Runs of one key sequence routed where they are give the rows routing by sorted
    groups gives, in whatever order the rows come."""
    random.Random(seed).shuffle(batch)
    rows: list[Any] = list(batch)
    grouped = sorted(rows, key=lambda row: tuple(row))
    for order in (rows, grouped):
        by_runs = route_attributes(order, attribute_shapes(order), grouped=True)
        by_groups = route_attributes(order)
        assert _plain(by_runs.dedicated) == _plain(by_groups.dedicated)
        assert (by_runs.keys, by_runs.values) == (by_groups.keys, by_groups.values)


def _plain(columns: list[Any]) -> list[Any]:
    return [None if column is None else list(column) for column in columns]


def _traffic(requests: int, seed: int) -> list[ReadableSpan]:
    """Finished spans of a few requests: a root, attempts and HTTP children, three key
    sequences, every span of a request starting at the same instant (ties in the sort)."""
    rng = random.Random(seed)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("by-shape", "1")
    for r in range(requests):
        start = T0 + rng.randint(0, 3) * 10**9  # requests share start times too
        request = f"{rng.getrandbits(64):016x}"
        root = tracer.start_span(
            "request",
            start_time=start,
            attributes={
                "retryscope.logical_request.id": request,
                "retryscope.span.role": "logical_request",
            },
        )
        for ordinal in range(1, rng.randint(1, 3) + 1):
            attempt = tracer.start_span(
                "attempt",
                context=set_span_in_context(root),
                start_time=start,
                attributes={
                    "retryscope.logical_request.id": request,
                    "retryscope.span.role": "attempt",
                    "retryscope.attempt.ordinal": ordinal,
                },
            )
            child = tracer.start_span(
                "POST",
                context=set_span_in_context(attempt),
                kind=SpanKind.CLIENT,
                start_time=start,
                attributes={"http.request.method": "POST", "server.port": 443 + r},
            )
            child.end(end_time=start + rng.randint(1, 9))
            attempt.end(end_time=start + 10)
        root.end(end_time=start + 20)
    provider.shutdown()
    return list(memory.get_finished_spans())


def _in_drilldown_order(table: pa.Table) -> pa.Table:
    """``table`` (rows in arrival order) stably sorted as files are."""
    order = pc.sort_indices(
        table,
        sort_keys=[
            ("logical_request_id", "ascending", "at_end"),
            ("start_time", "ascending", "at_end"),
        ],
    )
    return table.take(order)


def test_rows_by_shape_are_the_rows_in_span_order_regrouped() -> None:
    spans = _traffic(12, seed=1)
    table, order = spans_by_shape(spans)
    assert order is not None
    assert sorted(order) == list(range(len(spans)))
    expected = spans_to_columns(spans).to_table()
    assert table.take(np.argsort(order)).equals(expected)
    shapes = attribute_shapes([dict(span.attributes or {}) for span in np.array(spans)[order]])
    assert (
        sum(1 for i in range(1, len(shapes)) if shapes[i] != shapes[i - 1]) == len(set(shapes)) - 1
    )


def _batches_of(spans: list[ReadableSpan], size: int) -> list[list[ReadableSpan]]:
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def _files(exporter: ParquetSpanExporter) -> list[pa.Table]:
    return [pq.read_table(path) for path in exporter.files_written]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), batch=st.integers(3, 40), extra=st.integers(0, 50))
def test_files_are_those_arrival_order_makes(
    tmp_path_factory: Any, seed: int, batch: int, extra: int
) -> None:
    """Ties in (request, start) in arrival order; files cut by row count (mid-batch) hold
    the rows that arrived first; the rest is written by ``force_flush``. (Batches no
    larger than a file: each cut writes one file.)"""
    rotate = batch + extra
    spans = _traffic(15, seed)
    batches = _batches_of(spans, batch)
    directory: Path = tmp_path_factory.mktemp("by-shape") / "spans"
    exporter = ParquetSpanExporter(directory, rotate_rows=rotate, partitioning="none")
    try:
        for one in batches:
            exporter.export(one)
        assert exporter.force_flush()
    finally:
        exporter.shutdown()
    arrived = pa.concat_tables([spans_to_columns(one).to_table() for one in batches])
    files = _files(exporter)
    assert [f.num_rows for f in files[:-1]] == [rotate] * (len(files) - 1)
    offset = 0
    for written in files:
        expected = _in_drilldown_order(arrived.slice(offset, written.num_rows))
        assert ARRIVAL not in written.column_names
        assert written.equals(expected.cast(written.schema))
        offset += written.num_rows
    assert offset == arrived.num_rows


def test_a_full_buffer_drops_the_rows_that_arrived_first(tmp_path: Path) -> None:
    spans = _traffic(20, seed=7)
    batches = _batches_of(spans, 16)
    exporter = ParquetSpanExporter(
        tmp_path / "spans", rotate_rows=30, buffer_rows=37, partitioning="none"
    )
    try:
        for one in batches:
            table, order = spans_by_shape(one)
            exporter._buffer(table, order)
        kept = pa.concat_tables(exporter._pending)
        arrived = pa.concat_tables([spans_to_columns(one).to_table() for one in batches])
        survivors = arrived.slice(arrived.num_rows - 37)
        by_arrival = kept.take(pc.sort_indices(kept.column(ARRIVAL))).drop_columns([ARRIVAL])
        assert by_arrival.equals(survivors)
        assert exporter.dropped_spans == arrived.num_rows - 37
    finally:
        exporter.shutdown()
