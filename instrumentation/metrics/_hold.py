"""The live metrics' span-end path: each attempt's row held until its request ends.

``AttemptMetricsProcessor`` hands every span that ends to :meth:`Holder.on_end`. Most spans
cost one attribute lookup; an attempt span's row (:func:`~._facts.attempt_row`) is read
then and appended to its request's list; the end of a request (or continuation) span is
passed back to the processor, which records the request's figures. Compiled by mypyc with
:mod:`._facts` and :mod:`.._sdk_finished` (``setup.py``), so an attempt's end runs without
the interpreter between the span and its row.
"""

from __future__ import annotations

import threading
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


class Holder:
    """The attempts of each open request (``open``, guarded by ``lock``), and what to call
    when a request's first attempt ends (``first``: may evict), when a request or
    continuation span ends (``end``: the span, or None for a continuation) and when
    reading a span fails (``failed``: never raises into the application)."""

    def __init__(
        self,
        first: Callable[[str, AttemptRow], None],
        end: Callable[[str, Any], None],
        failed: Callable[[str], None],
    ) -> None:
        self.lock: Any = threading.Lock()
        self.open: dict[str, list[AttemptRow]] = {}
        self._first = first
        self._end = end
        self._failed = failed

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do when a span starts (compiled: no interpreter frame either)."""

    def on_end(self, span: Any) -> None:
        try:
            found = finished_attributes(span)
            if not found:
                return
            # (a dict, as the row takes it: compiled, each read skips a method lookup)
            attrs = found if isinstance(found, dict) else dict(found)
            role = attrs.get(_ROLE)
            if type(role) is not str:
                return
            request_id = attrs.get(_ID)
            if type(request_id) is not str:
                return
            if role == _ATTEMPT:
                kept = attempt_row(attrs, ended_fields(span))
                lock = self.lock
                lock.acquire()  # (acquire/release: cheaper than ``with`` on the hot path)
                try:
                    held = self.open.get(request_id)
                    if held is not None:
                        held.append(kept)
                        return
                finally:
                    lock.release()
                self._first(request_id, kept)
            elif role == _REQUEST:
                self._end(request_id, span)
            elif role == _CONTINUATION:
                self._end(request_id, None)
        except Exception:  # never break the instrumented application
            self._failed("recording a span's metrics")
