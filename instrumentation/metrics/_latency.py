"""The median latency of recent attempts, per route and layer (doomed-dispatch checks).

The report compares an attempt's time left with the median latency of every attempt of
its route and layer in the data set; live, only the attempts seen so far exist, so the
median is over a window of the most recent ones. It is the same figure once the window
holds the traffic the report reads.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final

_SORT_FROM: Final = 32
"""New values are sorted in together once they are more than 1/32 of the window (a sort
passes over the whole window; an insertion only moves part of it)."""


class RollingMedian:
    """The median (interpolated, as DuckDB's ``quantile_cont(x, 0.5)``) of the last
    ``size`` values added.

    Values are taken in as they come and ordered only when a median is needed (a route
    whose attempts carry no deadline never needs one, nor does a request whose time left
    exceeds every latency in the window): up to ``size`` new ones are inserted into the
    ordered window (one by one, or appended and sorted once when many), more replace it."""

    __slots__ = ("_ceiling", "_order", "_pending", "_size", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self._size = size
        self._order: deque[float] = deque()
        self._sorted: list[float] = []
        self._pending: list[float] = []
        self._ceiling: float | None = None
        """At least the largest value in the window (None: the window is empty)."""

    def extend(self, values: Iterable[float]) -> None:
        """Add ``values`` in order (the oldest drop out past ``size``)."""
        pending = self._pending
        before = len(pending)
        pending.extend(values)
        if len(pending) == before:
            return
        top = max(pending[before:])
        if self._ceiling is None or top > self._ceiling:
            self._ceiling = top
        if len(pending) > 2 * self._size:
            del pending[: -self._size]  # only the last ``size`` can still be in the window

    def _settle(self) -> None:
        """Move the values taken in into the ordered window."""
        pending, size = self._pending, self._size
        if len(pending) >= size:
            recent = pending[-size:]
            self._order, self._sorted = deque(recent), sorted(recent)
        else:
            order, ordered = self._order, self._sorted
            position, oldest = bisect.bisect_left, order.popleft
            for _ in range(len(order) + len(pending) - size):
                del ordered[position(ordered, oldest())]
            order.extend(pending)
            if len(pending) * _SORT_FROM < len(ordered):  # a few: inserted one by one
                insort = bisect.insort
                for value in pending:
                    insort(ordered, value)
            else:  # many: appended and sorted once (a sorted run plus the new ones)
                ordered.extend(pending)
                ordered.sort()
        pending.clear()
        self._ceiling = self._sorted[-1]

    def median(self) -> float | None:
        if self._pending:
            self._settle()
        values = self._sorted
        n = len(values)
        if not n:
            return None
        mid = n // 2
        return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2

    def count_below(self, values: Sequence[float]) -> int:
        """How many of ``values`` are below the median (0 with an empty window). When none
        is below the largest value the window may hold, none is below its median, and the
        window is not ordered: the usual case of time left against latency."""
        ceiling = self._ceiling
        if ceiling is None or not values or min(values) >= ceiling:
            return 0
        median = self.median()
        return 0 if median is None else sum(map(operator.lt, values, itertools.repeat(median)))
