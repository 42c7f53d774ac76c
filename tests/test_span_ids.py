"""Span and trace ids as hex text, a batch at a time, against ``format`` one id at a time."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.instrumentation.export._span_ids import hex_ids, span_id_column

_IDS = st.integers(0, 2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(_IDS, max_size=40))
def test_span_id_column_is_format_016x(ids: list[int]) -> None:
    expected = pa.array([format(i, "016x") for i in ids], type=pa.string())
    assert span_id_column(ids).equals(expected)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), _IDS), max_size=40))
def test_span_id_column_with_absent_rows_is_null_there(rows: list[int | None]) -> None:
    present = [r is not None for r in rows]
    ids = [r for r in rows if r is not None]
    expected = pa.array([None if r is None else format(r, "016x") for r in rows], pa.string())
    column = span_id_column(ids, present)
    assert column.equals(expected)
    assert column.null_count == rows.count(None)


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 2**128 - 1), max_size=30))
def test_hex_ids_is_format_032x(ids: list[int]) -> None:
    assert hex_ids(ids, 16) == [format(i, "032x") for i in ids]


def test_ids_out_of_range_are_as_wide_as_they_take() -> None:
    """A hand-made context: a negative or too-wide id, a bool — as ``format`` gives them."""
    odd = [2**64, -1, True, 5]
    assert span_id_column(odd).to_pylist() == [format(i, "016x") for i in odd]
    assert span_id_column([2**70], [False, True]).to_pylist() == [None, format(2**70, "016x")]
    assert hex_ids([2**130, -3], 16) == [format(2**130, "032x"), format(-3, "032x")]


def test_flags_that_do_not_match_the_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="do not match"):
        span_id_column([1, 2], [True, False, False])
