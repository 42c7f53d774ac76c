"""Constant columns: built once, recognised when sorting, never mistaken for other data."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.instrumentation.export import _constant_arrays as constant_arrays
from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.export._files import sort_for_drilldown
from retryscope.schema import ATTR_MAP


def _resource(length: int, service: str) -> pa.Array:
    return pa.array([[("service.name", f'"{service}"')]] * length, type=ATTR_MAP)


def test_a_constant_is_built_once_per_value_type_and_length() -> None:
    built: list[int] = []

    def build() -> pa.Array:
        built.append(1)
        return _resource(7, "built-once")

    first = constant_arrays.constant(("test", "built-once"), ATTR_MAP, 7, build)
    again = constant_arrays.constant(("test", "built-once"), ATTR_MAP, 7, build)
    assert again is first
    assert len(built) == 1
    assert first.equals(_resource(7, "built-once"))
    assert constant_arrays.nulls(5, pa.string()) is constant_arrays.nulls(5, pa.string())
    assert constant_arrays.nulls(5, pa.string()).null_count == 5


def test_a_build_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="constant column"):
        constant_arrays.constant(("test", "wrong"), ATTR_MAP, 3, lambda: _resource(4, "x"))


def test_long_columns_are_built_each_time_and_not_recognised() -> None:
    length = constant_arrays.MAX_CACHED_ROWS + 1
    one = constant_arrays.constant(
        ("test", "long"), ATTR_MAP, length, lambda: _resource(length, "l")
    )
    assert len(one) == length
    assert not constant_arrays.is_constant(pa.chunked_array([one]))


def test_recognised_only_when_every_chunk_is_a_cached_constant_of_one_value() -> None:
    a = constant_arrays.constant(("test", "a"), ATTR_MAP, 4, lambda: _resource(4, "a"))
    b = constant_arrays.constant(("test", "b"), ATTR_MAP, 4, lambda: _resource(4, "b"))
    a3 = constant_arrays.constant(("test", "a"), ATTR_MAP, 3, lambda: _resource(3, "a"))
    assert constant_arrays.is_constant(pa.chunked_array([a, a3, a.slice(1, 2)]))
    assert not constant_arrays.is_constant(pa.chunked_array([a, b]))
    # equal values, but not a cached array: not recognised (it is gathered as usual)
    assert not constant_arrays.is_constant(pa.chunked_array([a, _resource(4, "a")]))
    assert not constant_arrays.is_constant(pa.chunked_array([pc.take(a, [0, 1])]))


def test_the_registry_stays_bounded() -> None:
    first = constant_arrays.nulls(1, pa.int64())
    for length in range(2, 600):
        constant_arrays.nulls(length, pa.int64())
    assert len(constant_arrays._arrays) <= constant_arrays._MAX_ENTRIES
    assert len(constant_arrays._known) <= constant_arrays._MAX_ENTRIES
    # evicted: no longer recognised, still a valid column
    assert constant_arrays.is_constant(pa.chunked_array([first])) is (
        (None, pa.int64(), 1) in constant_arrays._arrays
    )
    assert first.null_count == 1


_SERVICES = st.sampled_from(["api", "worker", "batch"])


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["r1", "r2", "r3", None]),
                st.integers(0, 5),
                _SERVICES,
                st.booleans(),
            ),
            min_size=1,
            max_size=12,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_sorting_batches_with_constant_columns_equals_a_plain_take(
    batches: list[list[tuple[str | None, int, str, bool]]],
) -> None:
    """Batches of one resource (or mixed), with or without events: the sorted buffer is
    exactly the plain ``take`` of the concatenation in (request, start) order."""
    resources = {name: {"service.name": name} for name in ("api", "worker", "batch")}
    tables = []
    for rows in batches:
        cols = SpanColumns()
        for i, (request, start, service, event) in enumerate(rows):
            cols.append(
                trace_id=f"{i:032x}",
                span_id=f"{i:016x}",
                parent_span_id=None,
                name="s",
                kind="CLIENT",
                start_ns=start,
                end_ns=start + 1,
                status_code="UNSET",
                status_message=None,
                attributes=(
                    {"retryscope.logical_request.id": request} if request is not None else None
                ),
                resource=resources[service],
                scope_name=None,
                scope_version=None,
                events=[("e", start, None)] if event else (),
            )
        tables.append(cols.to_table())
    table = pa.concat_tables(tables)
    order = pc.sort_indices(
        table,
        sort_keys=[
            ("logical_request_id", "ascending", "at_end"),
            ("start_time", "ascending", "at_end"),
        ],
    )
    assert sort_for_drilldown(table).equals(table.take(order))


def test_a_forked_child_gets_a_lock_of_its_own() -> None:
    """A lock held by another thread when the process forks would never be released in
    the child: the child starts with a fresh one."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    with constant_arrays._lock:
        pid = os.fork()
        if pid == 0:  # the child: the cache still works
            try:
                column = constant_arrays.nulls(3, pa.float64())
                ok = constant_arrays.is_constant(pa.chunked_array([column]))
                os._exit(0 if ok else 1)
            except BaseException:
                os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
