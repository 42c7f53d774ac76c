"""The median latency of recent attempts, per route and layer (doomed-dispatch checks).

The report compares an attempt's time left with the median latency of every attempt of
its route and layer in the data set; live, only the attempts seen so far exist, so the
median is over a window of the most recent ones. It is the same figure once the window
holds the traffic the report reads.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable


class RollingMedian:
    """The median (interpolated, as DuckDB's ``quantile_cont(x, 0.5)``) of the last
    ``size`` values added."""

    __slots__ = ("_order", "_size", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self._size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []

    def extend(self, values: Iterable[float]) -> None:
        """Add ``values`` in order (the oldest drop out past ``size``)."""
        order, ordered, size = self._order, self._sorted, self._size
        insort, position = bisect.insort, bisect.bisect_left
        for value in values:
            if len(order) == size:
                del ordered[position(ordered, order.popleft())]
            order.append(value)
            insort(ordered, value)

    def median(self) -> float | None:
        values = self._sorted
        n = len(values)
        if not n:
            return None
        mid = n // 2
        return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2
