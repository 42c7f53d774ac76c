"""Attribute routing of :class:`SpanColumns` against a plain per-value reference.

The builder routes a batch by key sequence, a column at a time, and falls back to one value
at a time for odd groups; whatever the mix of keys, aliases and value types, every row must
come out exactly as the per-value rule says: a value that fits its dedicated column's type
goes there (an older alias only fills a column its current key left empty, and is kept in
the map too), everything else goes to the JSON-encoded ``attributes`` map, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan

from retryscope.instrumentation import _sdk
from retryscope.instrumentation.export._columns import SpanColumns, encode_value
from retryscope.instrumentation.export._exporter import spans_to_columns
from retryscope.schema import SPAN_SCHEMA
from retryscope.vocabulary import BY_KEY, DEDICATED, AttrType

from .export_support import make_spans


def _int_in(bits: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is not bool and isinstance(v, int) and -(2**bits) <= v < 2**bits


_FITS: dict[AttrType, Callable[[Any], bool]] = {
    AttrType.STR: lambda v: isinstance(v, str),
    AttrType.BOOL: lambda v: isinstance(v, bool),
    AttrType.INT32: _int_in(31),
    AttrType.INT: _int_in(63),
    AttrType.TIME_NS: _int_in(63),
    AttrType.FLOAT: lambda v: type(v) is not bool and isinstance(v, int | float),
}
"""Which values each column type holds, as the schema documents it."""


def _reference(attributes: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(dedicated column → value, attributes map) of one span, one value at a time."""
    dedicated: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for key, value in attributes.items():
        attr = BY_KEY.get(key)
        if attr is not None and _FITS[attr.type](value):
            if key == attr.key:
                dedicated[attr.column] = value
                continue
            dedicated.setdefault(attr.column, value)
        rest.append((key, encode_value(value)))
    return dedicated, rest


class _Str(str):
    """A ``str`` subclass: fits string columns, but not by exact type."""


_STR = st.sampled_from(["harness", "sdk", "a" * 40, "\u00e9t\u00e9", ""])
_INT = st.integers(min_value=-(2**40), max_value=2**40)
_SMALL = st.integers(min_value=-5, max_value=5)
_STR_LIST = st.lists(st.sampled_from(["harness", "sdk"]), max_size=3).map(tuple)
_KEYS = {  # key: the kind of value it usually carries
    "retryscope.logical_request.id": _STR,
    "retryscope.attempt.ordinal": _SMALL,  # INT32
    "retryscope.deadline": _INT,  # TIME_NS
    "retryscope.cost.actual_micros": _INT,  # INT
    "retryscope.route.fallback": st.booleans(),  # BOOL
    "app.layers": _STR_LIST,  # a list: always kept in the map
    "http.response.status_code": _SMALL,  # the current key of ...
    "http.request.method": _STR,
    "app.feature": _STR,  # no dedicated column
    "server.port": _SMALL,
}
_ALIASES = {"http.status_code": _SMALL, "http.method": _STR}  # ... these older aliases
_KINDS_OF_VALUE = (
    _STR,
    st.builds(_Str, st.sampled_from(["x", "harness"])),
    _INT,
    st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) - 1]),
    st.booleans(),
    st.floats(allow_nan=False),
    _STR_LIST,
    st.lists(st.integers(0, 3), min_size=1, max_size=2).map(tuple),
)
_ANY = st.one_of(_KINDS_OF_VALUE)


@st.composite
def _shape(draw: st.DrawFn) -> list[tuple[str, st.SearchStrategy[Any]]]:
    """A key sequence, each key with the kind of value it carries: mostly its usual kind
    (so whole groups fit their columns), sometimes another; older aliases now and then."""
    pool = {**_KEYS, **_ALIASES} if draw(st.booleans()) else _KEYS
    keys = draw(st.lists(st.sampled_from(sorted(pool)), max_size=8, unique=True))
    return [
        (key, pool[key] if draw(st.integers(0, 3)) else draw(st.sampled_from(_KINDS_OF_VALUE)))
        for key in keys
    ]


@st.composite
def _batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows drawn from a few key sequences (as spans of a few instrumentation points are),
    each with its own values (now and then of any kind); some carry no attributes at all."""
    shapes = draw(st.lists(_shape(), min_size=1, max_size=4))
    rows = draw(st.lists(st.sampled_from(shapes), min_size=1, max_size=24))
    return [
        {key: draw(_ANY if draw(st.integers(0, 19)) == 0 else kind) for key, kind in keys}
        for keys in rows
    ]


def _fields(attributes: dict[str, Any]) -> dict[str, Any]:
    """One span's arguments to :meth:`SpanColumns.append`: fixed but for its attributes."""
    return {
        "trace_id": "0" * 32,
        "span_id": "1" * 16,
        "parent_span_id": None,
        "name": "s",
        "kind": "CLIENT",
        "start_ns": 1,
        "end_ns": 2,
        "status_code": "UNSET",
        "status_message": None,
        "attributes": attributes,
        "resource": None,
        "scope_name": None,
        "scope_version": None,
    }


def _table(batches: list[list[dict[str, Any]]]) -> pa.Table:
    """The batches given to :meth:`SpanColumns.extend`, column by column."""
    cols = SpanColumns()
    for batch in batches:
        rows = [_fields(attributes) for attributes in batch]
        columns = {key: [row[key] for row in rows] for key in rows[0]}
        n = len(batch)
        cols.extend(**columns, events=[()] * n, links=[()] * n, dropped_attributes=[0] * n)
    return cols.to_table()


def _check(batches: list[list[dict[str, Any]]]) -> None:
    table = _table(batches)
    rows = [attributes for batch in batches for attributes in batch]
    expected = [_reference(attributes) for attributes in rows]
    assert table.column("attributes").to_pylist() == [rest for _, rest in expected]
    for attr in DEDICATED:
        want = pa.array(
            [dedicated.get(attr.column) for dedicated, _ in expected],
            SPAN_SCHEMA.field(attr.column).type,
        )
        assert table.column(attr.column).combine_chunks().equals(want), attr.column


@settings(max_examples=150, deadline=None)
@given(st.lists(_batches(), min_size=1, max_size=3))
def test_routing_matches_the_per_value_rule(batches: list[list[dict[str, Any]]]) -> None:
    _check(batches)


_ORDINAL, _COST, _FALLBACK = (
    "retryscope.attempt.ordinal",
    "retryscope.cost.actual_micros",
    "retryscope.route.fallback",
)


@pytest.mark.parametrize(
    "values",
    [
        {_ORDINAL: [1, 2**31]},  # one value out of int32 range
        {_ORDINAL: [2**31, 2**40]},  # all of them
        {_ORDINAL: [-(2**31), 2**31 - 1], _COST: [2**63 - 1, -(2**63)]},  # at the bounds
        {_COST: [2**63, 1]},
        {_ORDINAL: [True, 1]},  # a bool is not an int here
        {_ORDINAL: [True, False]},
        {_FALLBACK: [1, 0]},  # nor an int a bool
        {"retryscope.logical_request.id": [_Str("a"), "b"]},  # a str subclass
        {"retryscope.deadline": [1.5, 2]},
        {"http.status_code": [200, 503], "http.response.status_code": [None, 429]},
    ],
)
def test_groups_with_values_that_do_not_all_fit(values: dict[str, list[Any]]) -> None:
    """Two rows with the same keys, next to a row of other keys: each value is routed by
    the per-value rule even when its group cannot be routed a column at a time."""
    rows = [
        {key: column[row] for key, column in values.items() if column[row] is not None}
        for row in range(2)
    ]
    _check([[rows[0], {"app.feature": "x"}, rows[1]], rows])


def test_rows_appended_one_by_one_match_a_batch() -> None:
    """The ingest appends row by row; routing then runs over whole chunks of rows."""
    batch = [
        {"retryscope.attempt.ordinal": i, "app.feature": "draft", "http.method": "GET"}
        if i % 3
        else {"retryscope.attempt.ordinal": str(i), "http.response.status_code": 200}
        for i in range(5000)
    ]
    one_by_one = SpanColumns()
    for attributes in batch:
        one_by_one.append(**_fields(attributes))
    assert one_by_one.to_table().equals(_table([batch]))


class _Subclassed(ReadableSpan):
    """A span class of another library: read through the public properties only."""

    @property
    def name(self) -> str:
        return self._name


def _copy(span: ReadableSpan, cls: type[ReadableSpan]) -> ReadableSpan:
    return cls(
        span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def test_sdk_spans_read_directly_give_the_rows_their_properties_give() -> None:
    """The exporter reads the SDK's own span classes field by field; any other class (and
    a span without a context, which is skipped) goes through the public properties."""
    spans = make_spans(4)
    assert any(span.events for span in spans)
    assert any(span.links for span in spans)
    assert any(span.status.description for span in spans)
    plain = [_copy(span, ReadableSpan) for span in spans]
    foreign = [_copy(span, _Subclassed) for span in spans]
    no_context = ReadableSpan("no context", context=None)
    if not _sdk.PUBLIC_ONLY:
        assert {type(span) for span in spans} | {ReadableSpan} <= _sdk._paths.plain_types
    direct = spans_to_columns([*spans, no_context]).to_table()
    assert direct.num_rows == len(spans)
    assert spans_to_columns(plain).to_table().equals(direct)
    assert spans_to_columns(foreign).to_table().equals(direct)
    assert spans_to_columns([*plain[:3], foreign[3], *plain[4:]]).to_table().equals(direct)
    with _sdk.public_paths():
        assert spans_to_columns([*spans, no_context]).to_table().equals(direct)
