"""The latency window's median as values arrive in batches: the oldest leave, the new ones
come in one by one (a few) or sorted in together (many); either way the median is that of
the most recent ``size`` values."""

from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from retryscope.instrumentation.metrics._latency import _SORT_FROM, RollingMedian


@given(
    st.lists(st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=30),
    st.integers(1, 120),
)
def test_the_median_is_that_of_the_most_recent_values(batches: list[list[int]], size: int) -> None:
    window = RollingMedian(size)
    seen: list[float] = []
    for batch in batches:
        window.extend(float(x) for x in batch)
        seen += map(float, batch)
        assert window.median() == (statistics.median(seen[-size:]) if seen else None)


def test_a_few_values_are_inserted_and_many_sorted_in_with_the_same_median() -> None:
    size = 4 * _SORT_FROM
    for batch in (1, 3, 4, 5, size - 1):  # below, at and above a full window's switch
        window = RollingMedian(size)
        seen = [float((7 * k) % 101) for k in range(size)]
        window.extend(seen)
        assert window.median() == statistics.median(seen)
        for step in range(5):
            new = [float((13 * (k + step)) % 97) for k in range(batch)]
            window.extend(new)
            seen += new
            assert window.median() == statistics.median(seen[-size:])
