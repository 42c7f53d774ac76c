"""The live metrics' span-end path: each attempt's row held until its request ends.

``AttemptMetricsProcessor`` hands every span that ends to :meth:`Holder.on_end`. Most spans
cost one attribute lookup. A finished attempt span is queued (a ``deque``: appended
without the lock, taken out only under it); the queue is read in batches of
:data:`BATCH` (each span's row, :func:`~._facts.attempt_row`, appended to its request's
list), and whenever a request (or continuation) span ends. An ended request's
rows wait with its span until :data:`REQUESTS` have ended, then each is handed back to the
processor, which records its figures; :meth:`Holder.flush` hands over everything waiting
(the processor calls it before a reader collects, on ``force_flush`` and ``shutdown``).

Reading rows, and recording requests, in batches rather than between the SDK's work on
each span keeps that code and its data in the processor's caches: on a stamped span it
costs fewer cache misses than reading each row as its span ends, and recording requests
together about a third less than recording each as it ends (``bench/RESULTS.md``).
Compiled by mypyc with :mod:`._facts` and :mod:`.._sdk_finished` (``setup.py``), so a
batch runs without the interpreter between the span and its row.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from retryscope import vocabulary as v
from retryscope.instrumentation._sdk_finished import ended_fields, finished_attributes
from retryscope.instrumentation.metrics._facts import AttemptRow, attempt_row

_ROLE: Final[str] = v.SPAN_ROLE.key
_ID: Final[str] = v.LOGICAL_REQUEST_ID.key
_ATTEMPT: Final[str] = v.SpanRole.ATTEMPT.value
_REQUEST: Final[str] = v.SpanRole.LOGICAL_REQUEST.value
_CONTINUATION: Final[str] = v.SpanRole.CONTINUATION.value

BATCH: Final = 16
"""Finished attempt spans queued before their rows are read (a request's end reads the
queue at once): a few spans held a little longer, for code and data read together."""
REQUESTS: Final = 8
"""Ended requests whose figures wait to be recorded together (a collection records them
at once, so a reader never sees them late)."""


class Holder:
    """The attempts of each open request (``open``, guarded by ``lock``), the finished
    attempt spans not read yet (``queued``) and the ended requests not recorded yet
    (``ended``), at most ``max_open`` requests open. What to call: ``end`` for each ended
    request or continuation (its rows, and the request span or None for a continuation),
    ``evicted`` with the rows of the oldest open request when one more would pass
    ``max_open`` (both outside the lock, each failure contained), and ``failed`` when
    reading or recording fails (never raises into the application)."""

    def __init__(
        self,
        end: Callable[[list[AttemptRow], Any], None],
        evicted: Callable[[list[AttemptRow]], None],
        failed: Callable[[str], None],
        max_open: int,
    ) -> None:
        # re-entrant: reading a queued span runs its class's code, which may end a span
        self.lock: Any = threading.RLock()
        self.open: dict[str, list[AttemptRow]] = {}
        self.queued: deque[Any] = deque()
        self.ended: list[tuple[list[AttemptRow], Any]] = []
        self._end = end
        self._evicted = evicted
        self._failed = failed
        self._max_open = max_open

    def on_end(self, span: Any) -> None:
        try:
            found = finished_attributes(span)
            if not found:
                return
            # (a dict: compiled, a read skips the method lookup of a ``Mapping``'s ``get``)
            attrs = found if isinstance(found, dict) else dict(found)
            role = attrs.get(_ROLE)
            if type(role) is not str:
                return
            if role == _ATTEMPT:
                # (no lock: a deque's append is atomic, and a span queued before its
                # request ends is read by that end, which takes the queue under the lock)
                queued = self.queued
                queued.append(span)
                if len(queued) >= BATCH:
                    self.read_queued()
            elif role in (_REQUEST, _CONTINUATION):
                request_id = attrs.get(_ID)
                if type(request_id) is str:
                    self._request_ended(request_id, span if role == _REQUEST else None)
        except Exception:  # never break the instrumented application
            self._failed("recording a span's metrics")

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it at the fork)
        and nothing held; the parent records the requests it held."""
        self.lock = threading.RLock()
        self.open.clear()  # (in place: the processor holds this dict too)
        self.queued = deque()
        self.ended = []

    def read_queued(self) -> None:
        """Read the queued attempt spans into their requests' rows."""
        self._drain(False)

    def flush(self) -> None:
        """Read the queued attempt spans and hand over every ended request."""
        self._drain(True)

    def _drain(self, ended_too: bool) -> None:
        lock = self.lock
        lock.acquire()
        try:
            evicted = self._place()
            ended: list[tuple[list[AttemptRow], Any]] = []
            if ended_too:
                ended, self.ended = self.ended, ended
        finally:
            lock.release()
        self._hand_over(evicted, ended)

    def _request_ended(self, request_id: str, request: Any) -> None:
        lock = self.lock
        lock.acquire()
        try:
            evicted = self._place()
            rows = self.open.pop(request_id, None)
            ended = self.ended
            ended.append(([] if rows is None else rows, request))
            if len(ended) >= REQUESTS:
                self.ended = []
            else:
                ended = []
        finally:
            lock.release()
        self._hand_over(evicted, ended)

    def _hand_over(
        self, evicted: list[list[AttemptRow]], ended: list[tuple[list[AttemptRow], Any]]
    ) -> None:
        """Each evicted request's rows to ``evicted``, then each ended request to ``end``
        (one failing leaves the others)."""
        for rows in evicted:
            try:
                self._evicted(rows)
            except Exception:  # never break the instrumented application
                self._failed("recording an evicted request's metrics")
        for rows, request in ended:
            try:
                self._end(rows, request)
            except Exception:  # never break the instrumented application
                self._failed("recording a request's metrics")

    def _place(self) -> list[list[AttemptRow]]:
        """Append each queued span's row to its request's (the lock held); the rows of the
        requests evicted to make room."""
        queued = self.queued
        evicted: list[list[AttemptRow]] = []
        open_ = self.open
        while queued:  # (popped one by one: another thread may append meanwhile)
            span = queued.popleft()
            try:
                # (read again rather than queued with the span: one object per queued span)
                found = finished_attributes(span)
                attrs = found if isinstance(found, dict) else dict(found or {})
                request_id = attrs.get(_ID)
                if type(request_id) is str:
                    row = attempt_row(attrs, ended_fields(span))
                    held = open_.get(request_id)
                    if held is None:
                        if len(open_) >= self._max_open:
                            evicted.append(open_.pop(next(iter(open_))))
                        held = open_[request_id] = []
                    held.append(row)
            except Exception:  # one unreadable span: the others are still read
                self._failed("recording a span's metrics")
        return evicted
