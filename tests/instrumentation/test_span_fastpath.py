"""The guarded fast attribute write stores exactly what the SDK's ``set_attributes`` stores.

Every case runs the same values through :func:`add_clean_attributes` on one real SDK span
and through the public ``set_attributes`` on another with the same limits, with the fast
path available (this SDK) and with the public paths forced (``sdk_path``), and compares.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.trace import SpanKind

from retryscope import AttemptStampingProcessor, logical_request
from retryscope.instrumentation import _sdk
from retryscope.instrumentation._sdk import (
    PUBLIC_ONLY,
    _fast_write,
    _probe_span_type,
    add_clean_attributes,
    fast_paths,
    longest_string,
    public_paths,
    raw_attributes,
)


class Colour(enum.StrEnum):
    RED = "red"


def _pair(limits: SpanLimits, start: Mapping[str, Any]) -> tuple[Any, Any, TracerProvider]:
    provider = TracerProvider(span_limits=limits)
    tracer = provider.get_tracer("test")
    return (
        tracer.start_span("a", attributes=start),
        tracer.start_span("b", attributes=start),
        provider,
    )


def _same(values: Mapping[str, Any], limits: SpanLimits, start: Mapping[str, Any]) -> None:
    fast, public, provider = _pair(limits, start)
    add_clean_attributes(fast, values, longest_string(values))
    public.set_attributes(values)
    assert dict(fast.attributes) == dict(public.attributes)
    assert fast.dropped_attributes == public.dropped_attributes
    fast.end()
    public.end()
    provider.shutdown()


def test_this_sdk_has_the_expected_structure() -> None:
    assert _probe_span_type() is not None
    assert fast_paths()["span_type"] is not PUBLIC_ONLY


def test_a_changed_sdk_takes_the_public_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A span class that no longer keeps the SDK's ``set_attributes``, or attributes kept in
    another container, are not written into directly."""
    provider = TracerProvider()
    span_class = type(provider.get_tracer("test").start_span("s"))
    provider.shutdown()
    original = SdkSpan.set_attributes
    with monkeypatch.context() as patch:
        patch.setattr(span_class, "set_attributes", lambda self, a: original(self, a))
        assert _probe_span_type() is None
    with monkeypatch.context() as patch:
        patch.setattr(_sdk, "BoundedAttributes", type("Other", (BoundedAttributes,), {}))
        assert _probe_span_type() is None
    assert _probe_span_type() is span_class


@pytest.mark.parametrize(
    ("limits", "start", "values"),
    [
        (SpanLimits(), {"x": 1}, {"a": "v", "b": 2, "c": True, "d": 1.5}),
        (SpanLimits(max_span_attributes=3), {"x": 1, "y": 2}, {"a": "v", "b": 2}),  # evicts
        (SpanLimits(max_span_attribute_length=3), {}, {"a": "long value", "b": 2}),  # truncates
        (SpanLimits(), {"a": "old", "x": 1}, {"a": "new", "b": 2}),  # re-set key moves last
        (SpanLimits(), {}, {"a": ("x", "y"), "b": Colour.RED}),  # not plain: validated
        (SpanLimits(max_span_attributes=0), {}, {"a": "v"}),
    ],
)
def test_fast_write_equals_set_attributes(
    sdk_path: str, limits: SpanLimits, start: dict[str, Any], values: dict[str, Any]
) -> None:
    _same(values, limits, start)


def test_guards_refuse_what_the_sdk_would_change() -> None:
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2))
    tracer = provider.get_tracer("test")
    span: Any = tracer.start_span("s", attributes={"x": 1})
    assert _fast_write(span, {"a": 1}, 0)
    assert not _fast_write(span, {"b": 1}, 0)  # would evict
    assert not _fast_write(span, {"x": 2}, 0)  # already present
    span.end()
    assert not _fast_write(span, {}, 0)  # ended
    assert dict(span.attributes) == {"x": 1, "a": 1}
    long_limit = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=4))
    short: Any = long_limit.get_tracer("t").start_span("s")
    assert not _fast_write(short, {"a": "12345"}, 5)
    assert _fast_write(short, {"a": "1234"}, 4)
    short.end()
    provider.shutdown()
    long_limit.shutdown()


def test_longest_string_rejects_values_the_sdk_would_convert() -> None:
    assert longest_string({"a": "abc", "b": 1, "c": False, "d": 2.0}) == 3
    assert longest_string({}) == 0
    assert longest_string({"a": ("x",)}) is None
    assert longest_string({"a": Colour.RED}) is None
    assert longest_string({"": "x"}) is None
    assert longest_string({"a": None}) is None


def test_ended_span_is_left_alone(sdk_path: str, caplog: pytest.LogCaptureFixture) -> None:
    provider = TracerProvider()
    span = provider.get_tracer("test").start_span("s", attributes={"x": 1})
    span.end()
    add_clean_attributes(span, {"a": 1}, 0)
    assert dict(span.attributes or {}) == {"x": 1}
    assert "ended span" in caplog.text
    provider.shutdown()


def test_raw_attributes_reads_the_current_attributes(sdk_path: str) -> None:
    provider = TracerProvider()
    span = provider.get_tracer("test").start_span("s", attributes={"x": 1})
    attrs = raw_attributes(span)
    assert attrs is not None
    assert "x" in attrs
    assert "y" not in attrs
    span.end()
    provider.shutdown()


plain_values = st.one_of(
    st.text(max_size=12), st.integers(), st.booleans(), st.floats(allow_nan=False)
)


@settings(max_examples=60, deadline=None)
@given(
    start=st.dictionaries(st.sampled_from("abcdefgh"), plain_values, max_size=5),
    values=st.dictionaries(st.sampled_from("defghijk"), plain_values, max_size=6),
    max_attributes=st.one_of(st.none(), st.integers(0, 10)),
    max_length=st.one_of(st.none(), st.integers(0, 8)),
)
def test_fast_write_matches_sdk_for_any_plain_values(
    start: dict[str, Any],
    values: dict[str, Any],
    max_attributes: int | None,
    max_length: int | None,
) -> None:
    _same(
        values,
        SpanLimits(max_span_attributes=max_attributes, max_span_attribute_length=max_length),
        start,
    )


def _stamped_http_span(limits: SpanLimits) -> dict[str, Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with logical_request(operation="chat", tenant="acme", tracer_provider=provider) as req:
        with req.attempt("primary", route_release="m@1"):
            tracer = provider.get_tracer("opentelemetry.instrumentation.httpx")
            for _ in range(2):
                with tracer.start_as_current_span(
                    "POST", kind=SpanKind.CLIENT, attributes={"http.request.method": "POST"}
                ):
                    pass
        with tracer.start_as_current_span("inner", attributes={"k": "v"}):
            pass
    provider.shutdown()
    spans = {
        s.name + str(i): dict(s.attributes or {}) for i, s in enumerate(memory.get_finished_spans())
    }
    for attrs in spans.values():
        attrs.pop("retryscope.logical_request.id", None)  # random per request
        attrs.pop("retryscope.deadline.remaining_ms", None)
    return spans


@pytest.mark.parametrize(
    ("limits", "layer"),
    [
        (SpanLimits(), "transport"),
        # the SDK evicts the oldest: the join keys, written last, are kept
        (SpanLimits(max_span_attributes=5), "transport"),
        (SpanLimits(max_span_attribute_length=4), "tran"),  # the SDK truncated it
    ],
)
def test_processor_stamps_the_same_with_and_without_fast_path(
    limits: SpanLimits, layer: str | None
) -> None:
    fast = _stamped_http_span(limits)
    with public_paths():
        public = _stamped_http_span(limits)
    assert fast == public
    send = next(attrs for name, attrs in fast.items() if name.startswith("POST"))
    assert send.get("retryscope.attempt.layer") == layer  # classified as a transport attempt
