"""The Arrow fast path of ``retryscope ingest`` gives exactly the reference decoder's rows.

``decode_json_lines`` either returns the very table that ``decode_traces`` + ``SpanColumns``
build line by line, or None (the block is then decoded line by line); it never returns a
table for a block the reference rejects any line of.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.ingest._otlp_arrow import decode_json_lines
from retryscope.instrumentation.ingest._otlp_decode import OtlpFormatError, decode_traces
from retryscope.instrumentation.ingest._run import ingest
from retryscope.vocabulary import BY_KEY

from .export_support import make_spans, otlp_json_line, read_rows


def reference(lines: list[bytes]) -> pa.Table | None:
    """The reference rows, or None when the reference rejects any line."""
    cols = SpanColumns()
    for line in lines:
        if not line.strip():
            continue
        try:
            decode_traces(json.loads(line.decode("utf-8")), cols)
        except (UnicodeDecodeError, json.JSONDecodeError, OtlpFormatError):
            return None
    return cols.to_table()


def assert_same_or_declined(lines: list[bytes]) -> pa.Table | None:
    fast = decode_json_lines(lines)
    expected = reference(lines)
    if expected is None:
        assert fast is None, "the fast path accepted a block the reference rejects"
    elif fast is not None:
        assert fast.schema.equals(expected.schema, check_metadata=True)
        for name in expected.column_names:
            assert fast.column(name).equals(expected.column(name)), name
    return fast


HEX = "0123456789abcdefABCDEF"
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6
) | st.sampled_from(
    ['a"b', "back\\slash", "tab\there", "nul\x00", "é✓", "", "/x", "2026-11-30T01:02:03Z", "null"]
)
KEYS = st.sampled_from(sorted(BY_KEY)) | st.sampled_from(["app.k", "x", "service.name", ""])
INTS = (
    st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**31) - 2, 2**31 + 1) | st.integers(-3, 300)
)
TIMES = st.integers(0, 2**63 - 1) | st.integers(1_790_000_000 * 10**9, 1_800_000_000 * 10**9)


def _hex(width: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=HEX, min_size=width, max_size=width)


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def documents(numbers_as_text: bool, enums_as_names: bool) -> st.SearchStrategy[Any]:
    """Trace documents in one writer's style: 64-bit integers as strings or as numbers,
    enums as names or as numbers (Arrow infers one type per field and block)."""
    ints = st.builds(str, INTS) if numbers_as_text else INTS
    times = st.builds(str, TIMES) if numbers_as_text else TIMES
    scalars = st.one_of(
        st.builds(lambda s: {"stringValue": s}, TEXT),
        st.builds(lambda b: {"boolValue": b}, st.booleans()),
        st.builds(lambda i: {"intValue": i}, ints),
        st.builds(
            lambda f: {"doubleValue": f},
            st.floats(width=64),
        ),
        st.builds(lambda s: {"bytesValue": s}, st.sampled_from(["AAEC", "", "/w=="])),
        st.just({}),
    )
    values = (
        scalars
        | st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(scalars, max_size=3))
        | st.builds(
            lambda vs: {"arrayValue": {"values": [{"stringValue": v} for v in vs]}},
            st.lists(TEXT, max_size=3),
        )
        | st.builds(
            lambda kvs: {"kvlistValue": {"values": kvs}},
            st.lists(
                st.fixed_dictionaries({"key": TEXT, "value": scalars}),
                max_size=3,
                unique_by=lambda kv: kv["key"],
            ),
        )
        | st.just({"kvlistValue": {}})
    )
    attributes = st.lists(
        st.fixed_dictionaries({"key": KEYS, "value": values}),
        max_size=6,
        unique_by=lambda kv: kv["key"],
    )
    if enums_as_names:
        kinds: st.SearchStrategy[Any] = st.sampled_from(
            ["SPAN_KIND_CLIENT", "SERVER", "2", "SPAN_KIND_UNSPECIFIED", "INTERNAL"]
        )
        codes: st.SearchStrategy[Any] = st.sampled_from(["STATUS_CODE_ERROR", "OK", "0"])
    else:
        kinds, codes = st.integers(0, 5), st.integers(0, 2)
    span = st.fixed_dictionaries(
        {"traceId": _hex(32), "spanId": _hex(16)},
        optional={
            "parentSpanId": _hex(16) | st.just(""),
            "name": TEXT,
            "kind": kinds,
            "startTimeUnixNano": times,
            "endTimeUnixNano": times,
            "attributes": attributes,
            "status": _optional(code=codes, message=TEXT),
            "events": st.lists(
                _optional(name=TEXT, timeUnixNano=times, attributes=attributes), max_size=2
            ),
            "links": st.lists(
                st.fixed_dictionaries(
                    {"traceId": _hex(32), "spanId": _hex(16)},
                    optional={"attributes": attributes},
                ),
                max_size=2,
            ),
            "droppedAttributesCount": st.integers(0, 2**31 - 1),
            "flags": st.just(256),
            "traceState": st.just("a=b"),
        },
    )
    return st.fixed_dictionaries(
        {
            "resourceSpans": st.lists(
                _optional(
                    resource=_optional(attributes=attributes),
                    scopeSpans=st.lists(
                        _optional(
                            scope=_optional(name=TEXT, version=TEXT),
                            spans=st.lists(span, min_size=1, max_size=3),
                        ),
                        min_size=1,
                        max_size=2,
                    ),
                    schemaUrl=st.just("https://opentelemetry.io/schemas/1.26.0"),
                ),
                min_size=1,
                max_size=2,
            )
        }
    )


BLOCKS = st.tuples(st.booleans(), st.booleans()).flatmap(
    lambda style: st.lists(documents(*style), min_size=1, max_size=4)
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=4,
)


def _replace_somewhere(doc: Any, key: str, value: Any, pick: int) -> None:
    holders: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if key in node:
                holders.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    if holders:
        holders[pick % len(holders)][key] = value


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    docs=BLOCKS,
    mutate=st.none()
    | st.tuples(
        st.sampled_from(
            [
                "traceId",
                "spanId",
                "parentSpanId",
                "kind",
                "startTimeUnixNano",
                "stringValue",
                "intValue",
                "doubleValue",
                "boolValue",
                "arrayValue",
                "value",
                "key",
                "status",
                "code",
                "name",
                "attributes",
                "scope",
                "events",
            ]
        ),
        JSON_VALUES,
        st.integers(0, 50),
    ),
    pretty=st.booleans(),
)
def test_fast_path_rows_equal_reference_rows(
    docs: list[dict[str, Any]], mutate: tuple[str, Any, int] | None, pretty: bool
) -> None:
    if mutate is not None:
        _replace_somewhere(docs[0], *mutate)
    separators = (", ", ": ") if pretty else (",", ":")
    lines = [json.dumps(d, separators=separators, ensure_ascii=pretty).encode() for d in docs]
    assert_same_or_declined(lines)


def test_common_collector_output_takes_the_fast_path() -> None:
    """SDK spans of every attribute type, events and links, as the Collector writes them:
    decoded natively (the equality above is not vacuous), with blank lines between."""
    spans = make_spans(3)
    lines = [otlp_json_line(spans[:4]).encode(), b"", otlp_json_line(spans[4:]).encode() + b"\n"]
    fast = assert_same_or_declined(lines)
    assert fast is not None
    assert fast.num_rows == len(spans)


def test_text_that_looks_like_a_time_stays_text() -> None:
    """Arrow would infer a timestamp column from ISO-8601 strings; the declared text fields
    keep them strings, so such blocks still take the fast path."""
    stamp = "2026-11-30T01:02:03Z"
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "k", "value": {"stringValue": stamp}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": stamp, "version": stamp},
                        "spans": [
                            {
                                "traceId": "ab" * 16,
                                "spanId": "cd" * 8,
                                "name": stamp,
                                "kind": 3,
                                "status": {"code": 2, "message": stamp},
                                "attributes": [
                                    {"key": "retryscope.tenant", "value": {"stringValue": stamp}},
                                    {"key": "when", "value": {"stringValue": stamp}},
                                    {"key": "nan", "value": {"doubleValue": "NaN"}},
                                ],
                                "events": [{"name": stamp, "timeUnixNano": "5"}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    line = json.dumps(doc).replace('"NaN"', "NaN").encode()
    fast = assert_same_or_declined([line])
    assert fast is not None
    assert fast.column("tenant").to_pylist() == [stamp]
    assert ("nan", "NaN") in fast.column("attributes").to_pylist()[0]


@pytest.mark.parametrize(
    "case",
    [
        b'{"resourceSpans":[]} {"resourceSpans":[]}',  # two objects on one line
        b"{\n}",  # one object over two lines
        b'{"resourceSpans":null}',
        b'{"resourceLogs":[]}',
        b"[1]",
        b"{broken",
        b'{"a":"\\ud800"}',
        b'{"a":"\xff"}',
        b'{"resourceSpans":[],"a":"\xed\xa0\x80"}',  # invalid UTF-8 Arrow would take
        b'{"resourceSpans":[],"a":"\xc0\x80"}',
        b'\xef\xbb\xbf{"resourceSpans":[]}',
    ],
)
def test_blocks_the_reference_rejects_are_declined(case: bytes) -> None:
    good = otlp_json_line(make_spans(1)).encode()
    assert decode_json_lines([good, case]) is None


def test_declined_blocks_keep_line_numbers_and_good_lines(tmp_path: Any) -> None:
    """A block the fast path declines is decoded line by line: its bad line is reported by
    number, its good lines kept, and blocks before and after it are unaffected."""
    spans = make_spans(1)
    good = otlp_json_line(spans)
    src = tmp_path / "traces.jsonl"
    src.write_text("\n".join([good, good, "{not json", good]) + "\n")
    problems: list[str] = []
    summary = ingest([src], tmp_path / "out", report=problems.append)
    assert [p.split(": ")[0] for p in problems] == [f"{src}:3"]
    assert summary.rows_written == read_rows(tmp_path / "out").num_rows == 3 * len(spans)


def test_declined_large_blocks_are_split_and_keep_line_numbers(tmp_path: Any) -> None:
    """Bad lines far apart in a block over the split size: the halves are decoded on their
    own, and each bad line is still reported by its own number."""
    spans = make_spans(3)
    good = otlp_json_line(spans)
    count = (600 << 10) // len(good) + 2
    lines = [good] * count
    lines[4] = "{not json"
    lines[count - 3] = good.replace('"traceId":"', '"traceId":"zz', 1)
    src = tmp_path / "traces.jsonl"
    src.write_text("\n".join(lines) + "\n")
    problems: list[str] = []
    summary = ingest([src], tmp_path / "out", report=problems.append)
    assert [p.split(": ")[0] for p in problems] == [f"{src}:5", f"{src}:{count - 2}"]
    assert summary.rows_written == read_rows(tmp_path / "out").num_rows == (count - 2) * len(spans)


def test_blocks_parsed_in_parallel_pieces_with_a_line_longer_than_a_piece() -> None:
    """Over 1 MiB, Arrow parses the block in pieces on several threads; a line longer than
    a piece still fits one, and the rows are the reference's."""
    spans = make_spans(3)
    doc = json.loads(otlp_json_line(spans))
    short = json.dumps(doc).encode()
    long = dict(doc, resourceSpans=doc["resourceSpans"] * ((1 << 20) // len(short) + 2))
    lines = [short] * 40 + [json.dumps(long).encode()] + [short] * 40
    assert len(lines[40]) > 1 << 20
    fast = assert_same_or_declined(lines)
    assert fast is not None
    assert fast.num_rows == (80 + len(long["resourceSpans"]) // len(doc["resourceSpans"])) * len(
        spans
    )
