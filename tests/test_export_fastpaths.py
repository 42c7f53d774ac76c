"""The exporter's batch readers of SDK span fields give the rows the public API gives.

``spans_to_columns`` reads the fields of the SDK's spans directly and their attributes
straight from ``BoundedAttributes``; any other span class (or other attribute container)
takes the public properties, as every span does with the public paths forced; contexts and
statuses of other classes are read as the SDK's. Each case here builds the same spans both
ways and compares the tables.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, Status, StatusCode, set_span_in_context

from retryscope.instrumentation._sdk import public_paths
from retryscope.instrumentation.export._exporter import spans_to_columns


class _Context(SpanContext):
    """A context class of another library (read through its properties)."""


class _Status(Status):
    """A status class of another library (read through its properties)."""


class _Public(ReadableSpan):
    """A span class of another library: read through the public properties only."""

    @property
    def name(self) -> str:
        return self._name


def _as(span: ReadableSpan, *, context: bool, status: bool, cls: type[ReadableSpan]) -> Any:
    ctx, parent = span.context, span.parent
    if context:
        ctx = _Context(ctx.trace_id, ctx.span_id, ctx.is_remote, ctx.trace_flags)
        if parent is not None:
            parent = _Context(parent.trace_id, parent.span_id, parent.is_remote)
    st_ = _Status(span.status.status_code, span.status.description) if status else span.status
    return cls(
        span.name,
        context=ctx,
        parent=parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=st_,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _spans(count: int, attributes: int, errors: list[bool], limit: int) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=limit))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("fastpaths", "1")
    root = tracer.start_span("root")
    for i in range(count):
        ctx = None if i % 3 == 0 else set_span_in_context(root)
        span = tracer.start_span(
            f"s{i}", context=ctx, attributes={f"k{j}": j for j in range(attributes)}
        )
        if errors[i % len(errors)]:
            span.set_status(Status(StatusCode.ERROR, f"failed {i}"))
        elif i % 2:
            span.set_status(Status(StatusCode.OK))
        span.end()
    root.end()
    provider.shutdown()
    return list(memory.get_finished_spans())


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(1, 12),
    attributes=st.integers(0, 6),
    errors=st.lists(st.booleans(), min_size=1, max_size=4),
    limit=st.integers(1, 8),
    context=st.booleans(),
    status=st.booleans(),
    public=st.booleans(),
)
def test_direct_reads_equal_the_public_properties(
    count: int,
    attributes: int,
    errors: list[bool],
    limit: int,
    context: bool,
    status: bool,
    public: bool,
) -> None:
    spans = _spans(count, attributes, errors, limit)
    direct = spans_to_columns(spans).to_table()
    with public_paths():
        assert spans_to_columns(spans).to_table().equals(direct)
    other = [
        _as(s, context=context, status=status, cls=_Public if public else ReadableSpan)
        for s in spans
    ]
    # (a copy does not carry the dropped count: compared on its own below)
    fields = [name for name in direct.column_names if name != "dropped_attributes"]
    assert spans_to_columns(other).to_table().select(fields).equals(direct.select(fields))
    # mixed in one batch: each span read its own way
    mixed = [o if i % 2 else s for i, (s, o) in enumerate(zip(spans, other, strict=True))]
    mixed_table = spans_to_columns(mixed).to_table()
    assert mixed_table.select(fields).equals(direct.select(fields))
    assert mixed_table.column("dropped_attributes").to_pylist() == [
        s.dropped_attributes for s in mixed
    ]
    dropped = direct.column("dropped_attributes").to_pylist()
    assert dropped == [s.dropped_attributes for s in spans]
    assert any(dropped) == (attributes > limit)
