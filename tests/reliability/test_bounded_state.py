"""Per-request state is bounded whatever the application does with its sends.

A stream the caller abandons (the real OpenAI SDK under its GenAI instrumentation, ``break``
out of the iteration) and a send span never ended must not keep their logical request in
memory: the stamping processor's table of open sends holds requests weakly and is bounded
(:mod:`retryscope.instrumentation._open_sends`). ``make test`` runs 20,000 requests with
spans never ended; ``RETRYSCOPE_LOAD_FULL=1`` runs 100,000.
"""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
import weakref
from collections.abc import Iterator

import openai
import pytest
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from retryscope.instrumentation import AttemptStampingProcessor, LogicalRequest, logical_request
from retryscope.instrumentation._open_sends import DEFAULT_LIMIT, OpenSends
from tests.instrumentation.conftest import LocalServer, Reply, server

__all__ = ["server"]

FULL = os.environ.get("RETRYSCOPE_LOAD_FULL") == "1"


def _chunk(text: str) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, AttemptStampingProcessor]]:
    provider = TracerProvider()
    processor = AttemptStampingProcessor()
    provider.add_span_processor(processor)
    yield provider, processor
    provider.shutdown()


def _alive(refs: list[weakref.ref[LogicalRequest]]) -> int:
    gc.collect()
    return sum(ref() is not None for ref in refs)


def test_abandoned_openai_streams_leave_no_request_behind(
    server: LocalServer, provider: tuple[TracerProvider, AttemptStampingProcessor]
) -> None:
    tracer_provider, processor = provider
    assert processor.aged == 0
    server.reply = lambda _r: Reply(
        200,
        # each stream on its own connection: an abandoned one is never reused half-read
        (("Content-Type", "text/event-stream"), ("Connection", "close")),
        chunks=tuple(_chunk(f"token {i}") for i in range(20)),
    )
    client = openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1", max_retries=0)
    OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)
    refs = []
    try:
        for _ in range(200):
            with (
                logical_request(operation="chat", tracer_provider=tracer_provider) as req,
                req.attempt("openai"),
            ):
                stream = client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                )
                for _chunk_read in stream:
                    break  # the caller abandons the stream
            refs.append(weakref.ref(req))
            del req, stream
    finally:
        OpenAIInstrumentor().uninstrument()
    assert len(server.requests) == 200
    assert _alive(refs) == 0  # before: 200 of 200 kept by the processor's table
    assert len(processor._open) + processor.aged == 200  # each send stayed open


@pytest.mark.load
def test_sends_never_ended_keep_memory_flat(
    provider: tuple[TracerProvider, AttemptStampingProcessor],
) -> None:
    tracer_provider, processor = provider
    http = tracer_provider.get_tracer("opentelemetry.instrumentation.httpx")
    requests = 100_000 if FULL else 20_000

    def one(i: int) -> LogicalRequest:
        with logical_request(operation="chat", tracer_provider=tracer_provider) as req:
            with req.attempt("primary"):
                http.start_span(  # never ended
                    "POST",
                    kind=SpanKind.CLIENT,
                    attributes={"http.request.method": "POST", "url.full": f"http://h/{i}"},
                )
        return req

    for i in range(100):  # warm up every cache
        one(i)
    gc.collect()
    tracemalloc.start()
    try:
        refs = [weakref.ref(one(i)) for i in range(requests)]
        gc.collect()
        grown, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _alive(refs) == 0
    assert len(processor._open) <= DEFAULT_LIMIT
    assert processor.aged >= requests - DEFAULT_LIMIT  # each forgotten entry counted
    # the weak references themselves and the bounded table; before: 15.6 KB per request
    assert grown < 8_000_000 + 100 * requests, grown


def test_open_send_table_ages_out_collected_requests_then_drops_the_oldest() -> None:
    provider = TracerProvider()
    table = OpenSends(limit=4)

    def request() -> LogicalRequest:
        return logical_request(operation="chat", tracer_provider=provider)

    live = [request() for _ in range(3)]
    for span_id, req in enumerate(live, start=1):
        table.add(span_id, req)
    table.add(4, request())  # its request is collected: its send never ends
    gc.collect()
    assert len(table.entries) == 4  # at the limit: nothing forgotten yet
    assert (table.aged, table.dropped) == (0, 0)
    table.add(5, live[0])  # past it: the collected one ages out, the oldest live go
    assert (table.aged, table.dropped) == (1, 2)
    assert list(table.entries) == [3, 5]
