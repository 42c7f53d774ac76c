"""The stamping processor's table of open sends, bounded whatever the application does.

When a span taken for a send ends, its request is told (it may no longer turn into a call).
A send that never ends — a stream the caller abandoned, a span an instrumentation never
ends — must not keep its request alive: the table holds each request weakly, so a request
the application is done with is collected with everything it recorded (measured before:
15.6 KB per request never given back). The table is bounded too: past ``limit`` entries,
those of collected requests are forgotten (``aged``), then the oldest of live ones until
half the limit is left (``dropped``: their requests keep their own record of the send
until they are collected; nothing else changes, a span cannot start beneath a send that
has ended). Each sweep is paid for by the ``limit / 2`` sends added since the last.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from retryscope.instrumentation._context import LogicalRequest

Sent = tuple[str, str, int, Mapping[str, Any]]
"""A span the stamping processor made a send, in the place the recorder gave it: its request
id, its enclosing attempt's layer and ordinal ("" and -1: the request's top) and what was
stamped on it (its ordinal, its operation). The live metrics count the send in that place,
whatever user code writes on the span afterwards; plain values, so the entry keeps no
request alive."""

DEFAULT_LIMIT: Final = 16_384
"""Open sends remembered at most (about 100 bytes each once their request is collected)."""


class OpenSends:
    """Span id → the request of a send still open, held weakly, and its place; see the
    module."""

    __slots__ = ("aged", "dropped", "entries", "limit")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 2:
            raise ValueError(f"limit must be >= 2, got {limit!r}")
        self.limit = limit
        self.entries: dict[int, tuple[weakref.ref[LogicalRequest], Sent | None]] = {}
        """Added to and popped by the processor inline (one dict operation each)."""
        self.aged = 0
        """Entries forgotten because their request was collected before the send ended."""
        self.dropped = 0
        """Entries of live requests forgotten, oldest first, to keep the bound."""

    def add(self, span_id: int, request: LogicalRequest, sent: Sent | None = None) -> None:
        """What the processor does inline: hold ``request`` weakly (CPython reuses the
        request's one reference) beside ``sent``, and sweep past the limit."""
        entries = self.entries
        entries[span_id] = (weakref.ref(request), sent)
        if len(entries) > self.limit:
            self.sweep()

    def sweep(self) -> None:
        """Forget the entries of collected requests, then the oldest down to half the
        limit (each counted)."""
        # A snapshot: other threads add and pop meanwhile (each one dict operation).
        entries = self.entries
        for span_id, (ref, _) in list(entries.items()):
            if ref() is None and entries.pop(span_id, None) is not None:
                self.aged += 1
        excess = len(entries) - self.limit // 2
        if excess > 0:
            for span_id in list(islice(entries, excess)):
                if entries.pop(span_id, None) is not None:
                    self.dropped += 1
