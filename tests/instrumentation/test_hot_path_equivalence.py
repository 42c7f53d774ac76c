"""The hot-path shortcuts give exactly what the public OpenTelemetry API gives.

* the guarded attribute merge keeps the SDK's order when keys are re-set (the SDK moves a
  re-set key last), not only the same mapping;
* the spans and stamps are the same with the public paths;
* the scope a processor or ``current_scope`` sees is built once per request/attempt and
  carries the same stamp as before (request stamp plus the attempt's ordinal and route).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from retryscope import AttemptStampingProcessor, current_scope, logical_request
from retryscope.instrumentation._context import Layer
from retryscope.instrumentation._sdk import (
    add_clean_attributes,
    longest_string,
    public_paths,
)
from retryscope.vocabulary import (
    ATTEMPT_ORDINAL,
    HTTP_RESEND_COUNT,
    LAYER,
    OPERATION_ORDINAL,
    ROUTE_ID,
    SPAN_ROLE,
)

plain_values = st.one_of(st.text(max_size=6), st.integers(), st.booleans())


@settings(max_examples=80, deadline=None)
@given(
    start=st.dictionaries(st.sampled_from("abcdef"), plain_values, max_size=5),
    values=st.dictionaries(st.sampled_from("defghi"), plain_values, min_size=1, max_size=5),
    max_attributes=st.one_of(st.none(), st.integers(0, 12)),
)
def test_merge_keeps_the_sdk_order_of_re_set_keys(
    start: dict[str, Any], values: dict[str, Any], max_attributes: int | None
) -> None:
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=max_attributes))
    tracer = provider.get_tracer("test")
    fast: Any = tracer.start_span("a", attributes=start)
    public: Any = tracer.start_span("b", attributes=start)
    add_clean_attributes(fast, values, longest_string(values))
    public.set_attributes(values)
    assert list(fast.attributes.items()) == list(public.attributes.items())
    assert fast.dropped_attributes == public.dropped_attributes
    fast.end()
    public.end()
    provider.shutdown()


def _spans_of_a_run(provider: TracerProvider, exporter: InMemorySpanExporter) -> list[Any]:
    tracer = provider.get_tracer("thirdparty")
    with logical_request(
        operation="chat", tenant="acme", idempotency_key="k", tracer_provider=provider
    ) as req:
        with req.attempt("primary", route_release="r1") as outer:
            for _ in range(2):
                with tracer.start_as_current_span(
                    "POST", kind=SpanKind.CLIENT, attributes={"http.request.method": "POST"}
                ):
                    pass
            with tracer.start_as_current_span("inner work"):
                pass
            with req.attempt("primary", layer=Layer.TRANSPORT):
                with tracer.start_as_current_span(
                    "POST", kind=SpanKind.CLIENT, attributes={"http.method": "POST"}
                ):
                    pass
            outer.set_outcome("success")
        with req.attempt("fallback", route_priority=1):
            pass
    provider.force_flush()
    return list(exporter.get_finished_spans())


def _comparable(spans: list[Any]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Names and attributes in order, without the per-run id and times."""
    volatile = {"retryscope.logical_request.id", "retryscope.deadline.remaining_ms"}
    return [(s.name, [(k, v) for k, v in s.attributes.items() if k not in volatile]) for s in spans]


def _one_run() -> list[tuple[str, list[tuple[str, Any]]]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = _spans_of_a_run(provider, exporter)
    parents = {s.name: s.parent.span_id for s in spans if s.parent is not None}
    ids = {s.name: s.context.span_id for s in spans}
    assert parents["inner work"] == ids["attempt primary"]
    provider.shutdown()
    return _comparable(spans)


def test_spans_are_the_same_with_the_public_paths() -> None:
    runs = [_one_run()]
    with public_paths():
        runs.append(_one_run())
    assert runs[0] == runs[1]
    transport = [attrs for name, attrs in runs[0] if name == "POST"]
    # two sends classified as transport attempts 1 and 2; the send inside retryscope's own
    # transport attempt (ordinal 3) is the same send seen twice: stamped only
    assert [dict(a).get(LAYER.key) for a in transport] == ["transport", "transport", None]
    assert [dict(a)[ATTEMPT_ORDINAL.key] for a in transport] == [1, 2, 3]
    assert SPAN_ROLE.key not in dict(transport[2])


def test_scope_is_built_once_and_carries_the_attempt_stamp() -> None:
    provider = TracerProvider()
    with logical_request(operation="chat", tenant="acme", tracer_provider=provider) as req:
        request_scope = current_scope()
        assert request_scope is not None
        assert request_scope.attempt is None
        assert request_scope.request is req
        assert request_scope.stamp == req.stamp
        assert current_scope() is request_scope
        with req.attempt("primary") as attempt:
            scope = current_scope()
            assert scope is not None
            assert scope is current_scope()
            assert scope.attempt is attempt
            assert scope.request is req
            expected: Mapping[str, Any] = {
                **req.stamp,
                ATTEMPT_ORDINAL.key: 1,
                ROUTE_ID.key: "primary",
            }
            assert dict(scope.stamp) == expected
            assert scope.stamp_longest == longest_string(expected)
            with pytest.raises(TypeError):
                scope.stamp[SPAN_ROLE.key] = "x"  # type: ignore[index]
            seen: list[Any] = []
            ctx = otel_context.get_current()
            thread = threading.Thread(target=lambda: seen.append(current_scope(ctx)))
            thread.start()
            thread.join()
            assert seen == [scope]
        assert current_scope() is request_scope
    assert current_scope() is None
    provider.shutdown()


def test_ordinals_are_keyed_by_layer_and_continue_after_prior_attempts() -> None:
    provider = TracerProvider()
    with logical_request(operation="chat", tracer_provider=provider) as req:
        req.count_prior_attempt("primary")
        req.count_prior_attempt("primary", layer="transport")
        with req.attempt("primary") as attempt:
            pass
        assert attempt.ordinal == 2
        assert attempt.route_ordinal == 2
        assert req.ordinals() == {Layer.HARNESS: 2, Layer.TRANSPORT: 1}
        assert all(type(layer) is Layer for layer in req.ordinals())
    provider.shutdown()


def test_a_send_inside_an_open_send_makes_it_a_call_and_takes_its_ordinals() -> None:
    """The processor looks up a send's parent span only while some send is open: a send
    started inside one still turns it into a call, and sends after it closed do not."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("third.party")
    http = {"http.request.method": "POST", "url.full": "https://llm.example/v1/chat"}
    other = {"http.request.method": "POST", "url.full": "https://llm.example/v1/embed"}
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("primary"):
            with tracer.start_as_current_span("call", kind=SpanKind.CLIENT, attributes=http):
                for _ in range(2):
                    with tracer.start_as_current_span(
                        "inner", kind=SpanKind.CLIENT, attributes=http
                    ):
                        pass
            with tracer.start_as_current_span("after", kind=SpanKind.CLIENT, attributes=other):
                with tracer.start_as_current_span("internal"):
                    pass
    provider.shutdown()
    spans = {
        (s.name, s.context.span_id): dict(s.attributes or {}) for s in exporter.get_finished_spans()
    }
    by_name: dict[str, list[dict[str, Any]]] = {}
    for (name, _), attrs in spans.items():
        by_name.setdefault(name, []).append(attrs)
    (call,) = by_name["call"]
    inner = by_name["inner"]
    (after,) = by_name["after"]
    assert call[SPAN_ROLE.key] == "call"
    assert [a[SPAN_ROLE.key] for a in inner] == ["attempt", "attempt"]
    # the first send takes over the call's ordinal: transport ordinals 1, 2, 3 without a gap
    assert [a[ATTEMPT_ORDINAL.key] for a in inner] == [call[ATTEMPT_ORDINAL.key], 2]
    assert [a.get(HTTP_RESEND_COUNT.key) for a in inner] == [None, 1]  # the call's retry
    assert after[SPAN_ROLE.key] == "attempt"  # no send open around it: not part of a call
    assert after[ATTEMPT_ORDINAL.key] == 3
    assert after[OPERATION_ORDINAL.key] == 2
    assert after.get(HTTP_RESEND_COUNT.key) is None
