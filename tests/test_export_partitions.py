"""Partition directories by integer bucketing equal those of formatting every start time."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.instrumentation.export._config import Partitioning
from retryscope.instrumentation.export._files import split_by_partition
from retryscope.schema import TIMESTAMP

_FORMAT = {Partitioning.HOUR: "date=%Y-%m-%d/hour=%H", Partitioning.DAY: "date=%Y-%m-%d"}
_HOUR = 3_600 * 10**9


def _by_strftime(table: pa.Table, partitioning: Partitioning) -> dict[str, pa.Table]:
    keys = pc.strftime(table.column("start_time"), format=_FORMAT[partitioning])
    return {str(k): table.filter(pc.equal(keys, k)) for k in pc.unique(keys).to_pylist()}


@pytest.mark.parametrize("partitioning", [Partitioning.HOUR, Partitioning.DAY])
@settings(max_examples=40, deadline=None)
@given(
    starts=st.lists(
        st.one_of(
            st.integers(0, 2**62),
            st.integers(0, 50).map(lambda h: h * _HOUR + (_HOUR - 1) * (h % 2)),  # edges
            st.integers(-(2**40), -1),  # before 1970: the general path
        ),
        min_size=1,
        max_size=60,
    )
)
def test_split_by_partition_matches_formatting_each_row(
    partitioning: Partitioning, starts: list[int]
) -> None:
    table = pa.table({"start_time": pa.array(starts, TIMESTAMP), "row": range(len(starts))})
    split = split_by_partition(table, partitioning)
    expected = _by_strftime(table, partitioning)
    assert [name for name, _ in split] == sorted(expected)
    for name, rows in split:
        assert rows.equals(expected[name])
