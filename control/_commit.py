"""Streams under retry and fallback: the commit protocol (tentative events, terminal commit,
invalidation, resume).

A stream under retry or fallback must never show the caller a spliced answer. Under this
protocol every event a physical attempt streams is *tentative* and carries its identity:
``<stream id>/<attempt ordinal>/<seq>`` (seq 1, 2, … within the attempt). The attempt
that ends the request successfully is *committed* by one terminal ``commit`` event
(naming the attempt, its event count and the SHA-256 of its data); an attempt that fails
after streaming is *invalidated* by an ``invalidate`` event, after which a retry or a
fallback streams its own events from seq 1 — it never continues the invalidated prefix.
A client shows tentative events as provisional, drops an attempt's events when its
invalidation arrives, and acts only on committed ones. Resume rule: a client that lost
the connection sends the id of the last event it applied and receives every event the
stream logged after it, in order (an unknown id is an error; none means from the start).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from retryscope import vocabulary as v
from retryscope.instrumentation import Attempt


class EventKind(enum.StrEnum):
    DATA = "data"
    COMMIT = "commit"
    INVALIDATE = "invalidate"


class EventState(enum.StrEnum):
    """Where an attempt's data events stand."""

    TENTATIVE = "tentative"
    COMMITTED = "committed"
    INVALIDATED = "invalidated"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of the protocol; ``count`` and ``digest`` are set on commit/invalidate."""

    event_id: str
    stream_id: str
    attempt_ordinal: int
    seq: int
    kind: EventKind
    data: Any = None
    count: int | None = None
    digest: str | None = None


class StreamProtocolError(ValueError):
    """An event or operation the protocol does not allow (names what and why)."""


def event_id(stream_id: str, attempt_ordinal: int, seq: int) -> str:
    return f"{stream_id}/{attempt_ordinal}/{seq}"


def _data_digest(items: Iterable[Any]) -> str:
    """SHA-256 over the data events, each length-framed (bytes as is, text as UTF-8)."""
    h = hashlib.sha256()
    for item in items:
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


class CommitLog:
    """The server side of one logical request's stream: the ordered log of its events.

    Pure bookkeeping (no I/O, no clock): the controller appends to it and hands each new
    event to the caller's sink; :meth:`resume` serves a reconnecting client.
    """

    def __init__(self, stream_id: str) -> None:
        self.stream_id = stream_id
        self.events: list[StreamEvent] = []
        self._data: dict[int, list[Any]] = {}
        self._state: dict[int, EventState] = {}
        self.committed: int | None = None

    def state_of(self, attempt_ordinal: int) -> EventState | None:
        return self._state.get(attempt_ordinal)

    def _open(self, attempt_ordinal: int, what: str) -> None:
        if self.committed is not None:
            raise StreamProtocolError(f"{what}: attempt {self.committed} already committed")
        state = self._state.get(attempt_ordinal)
        if state is EventState.INVALIDATED:
            raise StreamProtocolError(f"{what}: attempt {attempt_ordinal} was invalidated")

    def emit(self, attempt_ordinal: int, data: Any) -> StreamEvent:
        """A tentative data event of ``attempt_ordinal``."""
        self._open(attempt_ordinal, "emit")
        for other, state in self._state.items():
            if other != attempt_ordinal and state is EventState.TENTATIVE:
                raise StreamProtocolError(
                    f"emit: attempt {other} is still tentative; invalidate it before "
                    f"attempt {attempt_ordinal} streams"
                )
        items = self._data.setdefault(attempt_ordinal, [])
        items.append(data)
        self._state[attempt_ordinal] = EventState.TENTATIVE
        seq = len(items)
        return self._log(attempt_ordinal, seq, EventKind.DATA, data=data)

    def invalidate(self, attempt_ordinal: int) -> StreamEvent | None:
        """Invalidate every event of the attempt (None when it streamed nothing)."""
        self._open(attempt_ordinal, "invalidate")
        if attempt_ordinal not in self._state:
            return None
        return self._close(attempt_ordinal, EventState.INVALIDATED, EventKind.INVALIDATE)

    def commit(self, attempt_ordinal: int) -> StreamEvent:
        """The terminal commit of the attempt's events (possibly none): the only one."""
        self._open(attempt_ordinal, "commit")
        self.committed = attempt_ordinal
        return self._close(attempt_ordinal, EventState.COMMITTED, EventKind.COMMIT)

    def _close(self, attempt_ordinal: int, state: EventState, kind: EventKind) -> StreamEvent:
        """The event ending the attempt's events: how many there were, and their digest."""
        self._state[attempt_ordinal] = state
        items = self._data.get(attempt_ordinal, [])
        count, digest = len(items), _data_digest(items)
        return self._log(attempt_ordinal, count, kind, count=count, digest=digest)

    def _log(self, attempt_ordinal: int, seq: int, kind: EventKind, **kw: Any) -> StreamEvent:
        suffix = "" if kind is EventKind.DATA else f".{kind.value}"
        event = StreamEvent(
            event_id(self.stream_id, attempt_ordinal, seq) + suffix,
            self.stream_id,
            attempt_ordinal,
            seq,
            kind,
            **kw,
        )
        self.events.append(event)
        return event

    def resume(self, last_event_id: str | None) -> tuple[StreamEvent, ...]:
        """Every event logged after ``last_event_id`` (all of them for None)."""
        if last_event_id is None:
            return tuple(self.events)
        for i, e in enumerate(self.events):
            if e.event_id == last_event_id:
                return tuple(self.events[i + 1 :])
        raise StreamProtocolError(f"resume: {last_event_id!r} is not an event of this stream")


class StreamReader:
    """The client side: applies events in order and enforces what the caller may use."""

    def __init__(self) -> None:
        self.attempt: int | None = None
        self.tentative: list[Any] = []
        self.committed: tuple[Any, ...] | None = None
        self.last_event_id: str | None = None
        self.invalidated: list[int] = []

    def apply(self, event: StreamEvent) -> None:
        if self.committed is not None:
            raise StreamProtocolError(f"{event.event_id}: the stream is already committed")
        if event.kind is EventKind.DATA:
            if self.attempt is not None and event.attempt_ordinal != self.attempt:
                raise StreamProtocolError(
                    f"{event.event_id}: attempt {self.attempt} is tentative and was not "
                    "invalidated; its output must never be continued by another attempt"
                )
            if event.seq != len(self.tentative) + 1:
                raise StreamProtocolError(
                    f"{event.event_id}: expected seq {len(self.tentative) + 1}"
                )
            self.attempt = event.attempt_ordinal
            self.tentative.append(event.data)
        elif event.kind is EventKind.INVALIDATE:
            if self.attempt == event.attempt_ordinal:
                self.attempt, self.tentative = None, []
            self.invalidated.append(event.attempt_ordinal)
        else:
            mine = self.tentative if self.attempt == event.attempt_ordinal else []
            if event.count != len(mine) or event.digest != _data_digest(mine):
                raise StreamProtocolError(
                    f"{event.event_id}: commits {event.count} events the client does not hold"
                )
            self.committed = tuple(mine)
        self.last_event_id = event.event_id


class AttemptStream:
    """What one attempt's call streams through (``Dispatch.stream``): tentative events
    delivered to the caller's sink at once, or held until the attempt wins its hedge race
    (``held``: nothing is visible before the winner commits)."""

    def __init__(
        self,
        log: CommitLog,
        attempt: Attempt,
        sink: Callable[[StreamEvent], None],
        *,
        held: bool,
    ) -> None:
        self.log = log
        self.attempt = attempt
        self.sink = sink
        self.held = held
        self._held: list[Any] = []
        self.events = 0

    def emit(self, data: Any) -> None:
        """Stream ``data`` as the attempt's next tentative event."""
        self.events += 1
        if self.held:
            self._held.append(data)
        else:
            self.sink(self.log.emit(self.attempt.ordinal, data))

    def commit(self) -> None:
        """The attempt won: release what it held, then commit it (the terminal event)."""
        for data in self._held:
            self.sink(self.log.emit(self.attempt.ordinal, data))
        self._held.clear()
        self.sink(self.log.commit(self.attempt.ordinal))
        self._record(EventState.COMMITTED)

    def invalidate(self) -> None:
        """The attempt failed or lost: drop what it held, invalidate what it streamed."""
        self._held.clear()
        if (event := self.log.invalidate(self.attempt.ordinal)) is not None:
            self.sink(event)
        if self.events:
            self._record(EventState.INVALIDATED)

    def _record(self, state: EventState) -> None:
        self.attempt.span.set_attributes(
            {v.STREAM_EVENTS.key: self.events, v.STREAM_EVENT_STATE_KEY: state.value}
        )
