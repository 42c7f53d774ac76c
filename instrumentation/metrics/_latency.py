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
    ``size`` values added.

    Values are taken in as they come and ordered only when a median is asked for (a route
    whose attempts carry no deadline never asks): up to ``size`` new ones are inserted
    into the ordered window (appended, then one sort), more replace it."""

    __slots__ = ("_order", "_pending", "_size", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self._size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []
        self._pending: list[float] = []

    def extend(self, values: Iterable[float]) -> None:
        """Add ``values`` in order (the oldest drop out past ``size``)."""
        pending = self._pending
        pending.extend(values)
        if len(pending) > 2 * self._size:
            del pending[: -self._size]  # only the last ``size`` can still be in the window

    def _settle(self) -> None:
        """Move the values taken in into the ordered window."""
        pending, size = self._pending, self._size
        if len(pending) >= size:
            recent = pending[-size:]
            self._order, self._sorted = deque(recent), sorted(recent)
        else:  # the oldest out one by one, the new ones in by one sort (one run: linear)
            order, ordered = self._order, self._sorted
            position, oldest = bisect.bisect_left, order.popleft
            for _ in range(len(order) + len(pending) - size):
                del ordered[position(ordered, oldest())]
            order.extend(pending)
            ordered.extend(pending)
            ordered.sort()
        pending.clear()

    def median(self) -> float | None:
        if self._pending:
            self._settle()
        values = self._sorted
        n = len(values)
        if not n:
            return None
        mid = n // 2
        return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2
