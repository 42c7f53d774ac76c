"""Scopes the application enters and never exits stay bounded.

Each scope keeps the token that restores the context it was entered in, and that context
held the scope entered before it: ``__enter__`` without ``__exit__`` on
``logical_request``/``attempt``, request after request in one thread, kept every one
alive (12-14 KB a request and its attempt). A context holds its scope weakly
(:class:`~retryscope.instrumentation._context._Handle`): a scope lives while the
application can still exit it; once nothing but contexts refers to it, it is collected,
counted in ``processor.aged``, and stamps and parents nothing more. A scope still held
stays open, stamps, and restores its context on exit.
"""

from __future__ import annotations

import contextvars
import gc
import json
import os
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryscope import vocabulary as v
from retryscope.instrumentation import AttemptStampingProcessor, current_scope, logical_request
from retryscope.instrumentation._context import _OPEN_SCOPES
from tests.reliability.support import run_script

FULL = os.environ.get("RETRYSCOPE_LOAD_FULL") == "1"
ID = v.LOGICAL_REQUEST_ID.key

_NEVER_CLOSED = """
import gc, json, sys, tracemalloc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from retryscope.instrumentation import AttemptStampingProcessor, logical_request

provider = TracerProvider()
processor = AttemptStampingProcessor()
provider.add_span_processor(processor)
ended = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(ended))
tracer = provider.get_tracer("app")

def one(i):
    req = logical_request(operation="chat", tracer_provider=provider).__enter__()
    attempt = req.attempt("primary").__enter__()  # neither is ever exited
    with tracer.start_as_current_span("work"):
        pass
    return req, attempt  # held until the next request's are

requests = int(sys.argv[1])
for i in range(100):  # warm up every cache
    held = one(i)
gc.collect()
tracemalloc.start()
quarters = []
for quarter in range(4):
    for i in range(requests // 4):
        held = one(i)
    ended.clear()
    gc.collect()
    quarters.append(tracemalloc.get_traced_memory()[0])
tracemalloc.stop()
held = one(0)
stamped = ended.get_finished_spans()[-1].attributes["retryscope.attempt.ordinal"]
ended.clear()
del held
gc.collect()
with tracer.start_as_current_span("after"):
    pass
(after,) = ended.get_finished_spans()
print(json.dumps({
    "quarters": quarters,
    "stamped": stamped,
    "aged": processor.aged,
    "after": {k: val for k, val in after.attributes.items() if k.startswith("retryscope.")},
}))
"""


def test_scopes_never_exited_keep_memory_flat_in_a_real_process() -> None:
    requests = 100_000 if FULL else 20_000
    result = json.loads(run_script(_NEVER_CLOSED, str(requests)).splitlines()[-1])
    first, *later = result["quarters"]
    # flat: no quarter above the first by more than noise; before: +12 KB per request
    assert max(later) - first < 256_000, result["quarters"]
    assert result["stamped"] == 1  # the last request, still held, stamped its work
    assert result["aged"] >= 2 * requests  # each request and its attempt counted
    assert result["after"] == {}  # nothing of them stamps a later span


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, AttemptStampingProcessor, InMemorySpanExporter]]:
    provider = TracerProvider()
    processor = AttemptStampingProcessor()
    provider.add_span_processor(processor)
    ended = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(ended))
    yield provider, processor, ended
    provider.shutdown()


def _stamps(ended: InMemorySpanExporter, name: str) -> dict[str, object]:
    (span,) = [s for s in ended.get_finished_spans() if s.name == name]
    return {k: val for k, val in (span.attributes or {}).items() if k.startswith("retryscope.")}


def test_a_scope_still_held_stays_open_then_one_dropped_ages_out(
    spans: tuple[TracerProvider, AttemptStampingProcessor, InMemorySpanExporter],
) -> None:
    provider, processor, ended = spans
    tracer = provider.get_tracer("app")
    listed = len(_OPEN_SCOPES)

    held: list[object] = []

    def enter() -> contextvars.Context:
        """A request and its attempt entered, never exited, in a context of their own."""
        req = logical_request(operation="chat", tracer_provider=provider).__enter__()
        held.extend((req, req.attempt("primary").__enter__()))
        return contextvars.copy_context()

    # held (the application can still exit it): open, stamps, restores on exit
    req = logical_request(operation="chat", tracer_provider=provider).__enter__()
    attempt = req.attempt("primary").__enter__()
    gc.collect()
    assert attempt.span.is_recording()
    with tracer.start_as_current_span("held"):
        pass
    assert _stamps(ended, "held")[v.ATTEMPT_ORDINAL.key] == 1
    assert processor.aged == 0
    attempt.__exit__(None, None, None)
    req.__exit__(None, None, None)
    assert current_scope() is None  # the context before them, restored
    assert len(_OPEN_SCOPES) == listed

    # dropped: collected, counted, and a span in its context is no longer stamped
    context = contextvars.Context().run(enter)
    assert len(_OPEN_SCOPES) == listed + 2
    context.run(lambda: tracer.start_span("still held").end())
    request_id = _stamps(ended, "still held")[ID]
    gc.collect()
    assert processor.aged == 0  # held: open
    held.clear()
    gc.collect()
    assert processor.aged == 2
    assert len(_OPEN_SCOPES) == listed
    context.run(lambda: tracer.start_span("dropped").end())
    assert _stamps(ended, "dropped") == {}
    assert context.run(lambda: current_scope()) is None

    def fresh() -> None:
        with logical_request(operation="next", tracer_provider=provider) as nxt:
            with nxt.attempt("fresh"):
                pass

    context.run(fresh)
    assert _stamps(ended, "attempt fresh")[ID] not in ("", request_id)
    assert v.PARENT_ATTEMPT_ORDINAL.key not in _stamps(ended, "attempt fresh")


def test_a_scope_collected_after_its_exit_is_not_counted(
    spans: tuple[TracerProvider, AttemptStampingProcessor, InMemorySpanExporter],
) -> None:
    provider, processor, _ended = spans
    kept: list[contextvars.Context] = []
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("primary"):
            kept.append(contextvars.copy_context())  # outlives both scopes
    del req
    gc.collect()
    assert kept[0].run(lambda: current_scope()) is None
    assert processor.aged == 0
