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


@given(
    st.lists(st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=30),
    st.lists(st.lists(st.integers(-5, 60), max_size=8), min_size=1, max_size=30),
    st.integers(1, 120),
)
def test_values_below_the_median_are_counted_as_against_the_most_recent_values(
    batches: list[list[int]], lefts: list[list[int]], size: int
) -> None:
    window = RollingMedian(size)
    seen: list[float] = []
    for batch, left in zip(batches, lefts, strict=False):
        window.extend(float(x) for x in batch)
        seen += map(float, batch)
        median = statistics.median(seen[-size:]) if seen else None
        expected = 0 if median is None else sum(x < median for x in left)
        assert window.count_below(left) == expected


def test_the_window_is_not_ordered_when_no_value_is_below_its_largest() -> None:
    window = RollingMedian(4)
    window.extend([3.0, 1.0, 2.0])
    assert window.count_below([3.0, 9.0]) == 0  # 3.0 is the largest: none below the median
    assert window._pending == [3.0, 1.0, 2.0]  # still as taken in
    assert window.count_below([2.0]) == 0  # 2.0 is the median, not below it
    assert window._pending == []  # ordered to find out
    window.extend([0.5])
    assert window.count_below([2.0, 1.0]) == 1  # median of 3, 1, 2, 0.5 is 1.5
    window.extend([7.0, 8.0, 9.0, 10.0])  # the window is now 7..10: the old 3.0 has gone
    assert window.count_below([3.0, 9.0]) == 1  # median 8.5
    assert RollingMedian(3).count_below([1.0]) == 0  # nothing seen: no median
