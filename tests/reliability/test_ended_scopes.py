"""Nothing of an ended request stamps later spans.

Python runs a generator in its consumer's context: an async generator abandoned inside
``logical_request``/``attempt`` leaves that scope attached to the consuming task, and
asyncio closes the generator later in another task, where the context cannot be detached.
The scope still in the task must then stamp nothing and parent nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryscope import vocabulary as v
from retryscope.instrumentation import (
    AttemptStampingProcessor,
    LogicalRequest,
    current_scope,
    logical_request,
)

ID = v.LOGICAL_REQUEST_ID.key


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    created = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(created))
    yield provider, created
    provider.shutdown()


def _stamps(created: InMemorySpanExporter, name: str) -> dict[str, object]:
    (span,) = [s for s in created.get_finished_spans() if s.name == name]
    return {k: val for k, val in (span.attributes or {}).items() if k.startswith("retryscope.")}


async def _until_closed(request: LogicalRequest) -> None:
    """Let asyncio's finaliser close the abandoned generator (in its own task)."""
    for _ in range(100):
        if request._ended:
            return
        await asyncio.sleep(0)
    raise AssertionError("the abandoned generator was never closed")


def test_abandoned_async_generator_request_stamps_no_later_span(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, created = spans
    tracer = provider.get_tracer("app")
    opened: list[LogicalRequest] = []

    async def stream() -> AsyncIterator[int]:
        with logical_request(operation="chat", tracer_provider=provider) as req:
            opened.append(req)
            with req.attempt("primary"):
                yield 1
                yield 2

    async def consume() -> None:
        async for _ in stream():
            break
        # still open: the generator is not closed yet, its scope is the task's
        with tracer.start_as_current_span("before close"):
            pass
        await _until_closed(opened[0])
        with tracer.start_as_current_span("after close"):
            assert current_scope() is None
        with logical_request(operation="next", tracer_provider=provider) as nxt:
            with nxt.attempt("fresh"):
                pass

    asyncio.run(consume())
    request_id = opened[0].id
    assert _stamps(created, "before close")[ID] == request_id
    assert _stamps(created, "after close") == {}
    fresh = _stamps(created, "attempt fresh")
    assert fresh[ID] != request_id


def test_abandoned_attempt_is_no_parent_and_stamps_its_open_request(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, created = spans
    tracer = provider.get_tracer("app")

    async def consume() -> None:
        with logical_request(operation="chat", tracer_provider=provider) as req:
            ended = asyncio.Event()

            async def attempt_stream() -> AsyncIterator[int]:
                try:
                    with req.attempt("abandoned", layer="sdk"):
                        yield 1
                        yield 2
                finally:
                    ended.set()

            async for _ in attempt_stream():
                break
            with tracer.start_as_current_span("inside open attempt"):
                pass
            await asyncio.wait_for(ended.wait(), 5)
            with tracer.start_as_current_span("after attempt closed"):
                pass
            with req.attempt("next", layer="sdk"):
                pass

    asyncio.run(consume())
    inside = _stamps(created, "inside open attempt")
    assert inside[v.ATTEMPT_ORDINAL.key] == 1
    after = _stamps(created, "after attempt closed")
    assert after[ID] == inside[ID]
    assert v.ATTEMPT_ORDINAL.key not in after  # the request's stamp, not the ended attempt's
    following = _stamps(created, "attempt next")
    assert following[v.ATTEMPT_ORDINAL.key] == 2
    assert v.PARENT_ATTEMPT_ORDINAL.key not in following
