"""Hostile attribute values through the real processor, batch processor and exporter: the
application never sees an exception, and every span is written faithfully or counted as
rejected (never silently lost)."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retryscope
from retryscope.instrumentation.export._columns import utf8_safe
from retryscope.instrumentation.export._gaps import GAP_TRACE_ID
from retryscope.vocabulary import BY_KEY, ROUTE_ID, TENANT
from tests.reliability.support import audit, json_round_trip, rows

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
CHARS = st.one_of(st.characters(), SURROGATES)
TEXT = st.one_of(
    st.text(CHARS, max_size=40),
    st.sampled_from([10_000, 300_000, 2_000_000]).map(lambda n: "é" * n),  # huge strings
)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
SCALARS = st.one_of(
    TEXT,
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(),  # beyond int64 too
    FLOATS,
    st.binary(max_size=40),  # includes invalid UTF-8
    st.none(),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(st.text(CHARS, max_size=10), max_size=5).map(tuple),  # homogeneous sequences
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5).map(tuple),
    st.lists(FLOATS, max_size=5).map(tuple),
    st.lists(SCALARS, max_size=4),  # mixed
    st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=8),
    st.dictionaries(st.text(max_size=5), SCALARS, max_size=3),
)
# Plain keys, keys with surrogates, and dedicated keys given values of any type.
KEYS = st.one_of(
    st.text(CHARS, min_size=1, max_size=12).map(lambda k: "x." + k),
    st.sampled_from([ROUTE_ID.key, TENANT.key, "retryscope.attempt.ordinal", "http.status_code"]),
)
ATTRIBUTES = st.dictionaries(KEYS, VALUES, max_size=6)


def _jsonable(value: Any) -> Any:
    """The JSON form the exporter documents: sequences as arrays, bytes as base64."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _same(stored: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(stored, float) and math.isnan(stored)
    if isinstance(expected, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(expected)
            and all(_same(s, e) for s, e in zip(stored, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == expected.keys()
            and all(_same(stored[k], expected[k]) for k in expected)
        )
    return bool(stored == expected) and type(stored) is type(expected)


def _check_faithful(span: Any, row: dict[str, Any]) -> None:
    generic = dict(row["attributes"])
    for key, value in (span.attributes or {}).items():
        attr = BY_KEY.get(key)
        if attr is not None and attr.key == key and row[attr.column] is not None:
            column = row[attr.column]
            expected = utf8_safe(value) if isinstance(value, str) else value
            assert column == expected or list(column) == list(expected), (key, value)
            continue
        assert utf8_safe(key) in generic, (key, generic)
        stored = json.loads(generic[utf8_safe(key)])
        assert _same(stored, json_round_trip(_jsonable(value))), (key, value, stored)
    assert row["name"] == utf8_safe(span.name)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    spans=st.lists(st.tuples(st.text(CHARS, max_size=20), ATTRIBUTES), min_size=1, max_size=4),
    route=st.text(CHARS, max_size=12),
    event_attributes=ATTRIBUTES,
)
def test_any_attribute_value_is_written_faithfully_or_counted(
    tmp_path_factory: Any,
    spans: list[tuple[str, dict[str, Any]]],
    route: str,
    event_attributes: dict[str, Any],
) -> None:
    directory: Path = tmp_path_factory.mktemp("spans")
    with audit(directory) as a:
        tracer = a.provider.get_tracer("hostile")
        # Nothing here may raise: the application's own code path.
        with (
            retryscope.logical_request(
                operation="chat", tenant=route, tracer_provider=a.provider
            ) as req,
            req.attempt(route=route, layer="harness") as attempt,
        ):
            attempt.set_outcome("success")
            for name, attributes in spans:
                with tracer.start_as_current_span(name) as span:
                    for key, value in attributes.items():
                        span.set_attribute(key, value)
                    span.add_event(name, event_attributes)
                    span.set_status(2, name)
        with tracer.start_as_current_span("outside", attributes=spans[0][1]):
            pass
        a.close()
    assert a.created is not None
    created = {format(s.context.span_id, "016x"): s for s in a.created.get_finished_spans()}
    table = rows(directory)
    written = {r["span_id"]: r for r in table.to_pylist() if r["trace_id"] != GAP_TRACE_ID}
    lost = sum(r["gap_dropped_spans"] for r in table.to_pylist() if r["trace_id"] == GAP_TRACE_ID)
    assert set(written) <= set(created)
    assert len(created) - len(written) == lost == a.exporter.dropped_spans
    for span_id, row in written.items():
        _check_faithful(created[span_id], row)
    assert a.exporter.dropped_spans == 0  # every value above is one the schema can hold


def test_a_span_the_schema_cannot_hold_is_rejected_alone(tmp_path: Path) -> None:
    """A span ending beyond the int64-nanosecond range cannot be a Parquet timestamp: it is
    counted as rejected (a telemetry-gap row) and the rest of its batch is written."""
    with audit(tmp_path) as a:
        tracer = a.provider.get_tracer("hostile")
        for i in range(5):
            span = tracer.start_span(f"s{i}")
            span.end(end_time=2**64 if i == 2 else None)
        a.close()
    table = rows(tmp_path).to_pylist()
    names = sorted(r["name"] for r in table if r["trace_id"] != GAP_TRACE_ID)
    gaps = [
        (r["gap_reason"], r["gap_dropped_spans"]) for r in table if r["trace_id"] == GAP_TRACE_ID
    ]
    assert names == ["s0", "s1", "s3", "s4"]
    assert gaps == [("rejected", 1)]
    assert a.exporter.dropped_spans == 1


def test_lone_surrogates_are_kept_exactly_in_values_and_escaped_in_names(tmp_path: Path) -> None:
    with audit(tmp_path) as a:
        tracer = a.provider.get_tracer("hostile")
        with tracer.start_as_current_span("n\udcff") as span:
            span.set_attribute("v", "x\ud800y")
            span.set_attribute("raw", b"\xff\xfe")
            span.set_attribute(ROUTE_ID.key, "\udfff")
        a.close()
    (row,) = rows(tmp_path).to_pylist()
    generic = dict(row["attributes"])
    assert json.loads(generic["v"]) == "x\ud800y"
    assert base64.b64decode(json.loads(generic["raw"])) == b"\xff\xfe"
    assert row["name"] == "n\\udcff"
    assert row["route_id"] == "\\udfff"
    assert a.exporter.dropped_spans == 0
