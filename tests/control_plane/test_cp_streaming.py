"""The streaming commit protocol: event identity, tentative → committed / invalidated, the
terminal commit, the resume rule; a stream that breaks mid-way never gets the fallback
spliced onto its prefix, under the sync and the async controller and under hedging."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from retryscope import vocabulary as v
from retryscope.control._calls import Dispatch
from retryscope.control._commit import (
    CommitLog,
    EventKind,
    EventState,
    StreamEvent,
    StreamProtocolError,
    StreamReader,
)
from retryscope.control._controller import AsyncRetryController, RetryController
from retryscope.control._lab import (
    FALLBACK,
    REQUEST_ARGUMENTS,
    reference_policy,
)
from retryscope.control._policy import HedgePolicy
from retryscope.vocabulary import Terminal

RUN = {**REQUEST_ARGUMENTS, "deadline_ms": 5_000}


def test_events_are_identified_and_tentative_until_the_terminal_commit() -> None:
    log = CommitLog("req-1")
    a = log.emit(1, "Hel")
    b = log.emit(1, "lo")
    assert (a.event_id, b.event_id) == ("req-1/1/1", "req-1/1/2")
    assert log.state_of(1) is EventState.TENTATIVE
    commit = log.commit(1)
    assert (commit.kind, commit.event_id, commit.count) == (EventKind.COMMIT, "req-1/1/2.commit", 2)
    assert log.state_of(1) is EventState.COMMITTED
    for late in (lambda: log.emit(1, "!"), lambda: log.commit(1), lambda: log.invalidate(1)):
        with pytest.raises(StreamProtocolError, match="already committed"):
            late()
    reader = StreamReader()
    for event in log.events:
        reader.apply(event)
    assert reader.committed == ("Hel", "lo")


def test_an_invalidated_attempt_is_never_continued() -> None:
    log = CommitLog("req-1")
    log.emit(1, "The incident is ")
    with pytest.raises(StreamProtocolError, match="still tentative"):
        log.emit(3, "Severity 2")  # a fallback splicing onto the open prefix
    invalid = log.invalidate(1)
    assert invalid is not None
    assert (invalid.kind, invalid.count) == (EventKind.INVALIDATE, 1)
    with pytest.raises(StreamProtocolError, match="invalidated"):
        log.emit(1, "severity 2")
    assert log.emit(3, "Severity 2").event_id == "req-1/3/1"  # a fresh identity
    assert log.invalidate(2) is None  # an attempt that streamed nothing has nothing to drop


def test_the_reader_refuses_a_splice_and_a_commit_it_cannot_verify() -> None:
    reader = StreamReader()
    reader.apply(StreamEvent("r/1/1", "r", 1, 1, EventKind.DATA, "partial"))
    with pytest.raises(StreamProtocolError, match="never be continued"):
        reader.apply(StreamEvent("r/3/1", "r", 3, 1, EventKind.DATA, "fallback"))
    with pytest.raises(StreamProtocolError, match="does not hold"):
        reader.apply(StreamEvent("r/1/1.commit", "r", 1, 1, EventKind.COMMIT, count=1, digest="0"))


def test_resume_replays_everything_after_the_last_event_the_client_applied() -> None:
    log = CommitLog("req-1")
    first = log.emit(1, "The incident is ")
    log.emit(1, "severity 2 because")
    log.invalidate(1)
    log.emit(3, '{"severity": 2}')
    log.commit(3)
    assert log.resume(None) == tuple(log.events)
    missed = log.resume(first.event_id)
    assert [e.event_id for e in missed] == [
        "req-1/1/2",
        "req-1/1/2.invalidate",
        "req-1/3/1",
        "req-1/3/1.commit",
    ]
    reader = StreamReader()
    reader.apply(first)  # what the client had before it lost the connection
    for event in missed:
        reader.apply(event)
    assert reader.committed == ('{"severity": 2}',)
    assert reader.invalidated == [1]
    with pytest.raises(StreamProtocolError, match="not an event"):
        log.resume("req-2/1/1")


# --- a stream that breaks mid-way, over real HTTP -----------------------------------------------
@pytest.fixture
def streaming_server() -> Iterator[str]:
    """The primary streams two chunks and drops the connection; the fallback streams its
    whole answer (chunked transfer, real sockets on 127.0.0.1)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.path.startswith("/private-primary"):
                self._chunk(b"The incident is ")
                self._chunk(b"severity 2 because")
                self.close_connection = True
                self.connection.shutdown(2)  # broken mid-way: no terminal chunk
                return
            for part in (b'{"severity": ', b"2}"):
                self._chunk(part)
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _check(events: list[StreamEvent], result: Any, spans: Any) -> None:
    reader = StreamReader()
    for event in events:
        reader.apply(event)  # the caller's view enforces the protocol event by event
    assert result.terminal is Terminal.COMPLETE
    assert reader.committed == ('{"severity": ', "2}")  # the fallback's answer only
    assert reader.invalidated == [1, 2]  # both tries on the primary broke mid-way
    broken = [EventKind.DATA, EventKind.DATA, EventKind.INVALIDATE]
    assert [e.kind for e in events] == [*broken, *broken, *broken[:2], EventKind.COMMIT]
    attempts = {
        s.attributes[v.ATTEMPT_ORDINAL.key]: s.attributes
        for s in spans.exporter.get_finished_spans()
        if s.attributes[v.SPAN_ROLE.key] == "attempt" and s.attributes[v.LAYER.key] == "harness"
    }
    for broke in (1, 2):
        assert attempts[broke][v.STREAM_EVENT_STATE_KEY] == "invalidated"
        assert attempts[broke][v.STREAM_EVENTS.key] == 2
        assert attempts[broke][v.OUTCOME_KIND.key] == "unavailable"  # the break as such
    assert attempts[3][v.STREAM_EVENT_STATE_KEY] == "committed"


def test_a_broken_stream_is_invalidated_and_the_fallback_restarts_sync(
    streaming_server: str, spans: Any, clock: Any
) -> None:
    from retryscope.control._calls import AttemptFailed
    from retryscope.vocabulary import OutcomeKind

    events: list[StreamEvent] = []

    def call(d: Dispatch) -> str:
        assert d.stream is not None
        with httpx.Client(timeout=10) as client:
            url = f"{streaming_server}/{d.route.route_id}/v1/chat"
            try:
                with client.stream("POST", url, json={}) as response:
                    for chunk in response.iter_text():
                        d.stream.emit(chunk)
            except httpx.RemoteProtocolError as exc:
                raise AttemptFailed(OutcomeKind.UNAVAILABLE) from exc
        return "streamed"

    controller = RetryController(
        replace(reference_policy(), base_backoff_ms=0),
        clock=clock,
        sleep=clock.sleep,
        tracer_provider=spans.provider,
    )
    result = controller.run(call, stream=events.append, **RUN)
    _check(events, result, spans)


def test_a_broken_stream_is_invalidated_and_the_fallback_restarts_async(
    streaming_server: str, spans: Any
) -> None:
    from retryscope.control._calls import AttemptFailed
    from retryscope.vocabulary import OutcomeKind

    events: list[StreamEvent] = []

    async def call(d: Dispatch) -> str:
        assert d.stream is not None
        async with httpx.AsyncClient(timeout=10) as client:
            url = f"{streaming_server}/{d.route.route_id}/v1/chat"
            try:
                async with client.stream("POST", url, json={}) as response:
                    async for chunk in response.aiter_text():
                        d.stream.emit(chunk)
            except httpx.RemoteProtocolError as exc:
                raise AttemptFailed(OutcomeKind.UNAVAILABLE) from exc
        return "streamed"

    async def main() -> Any:
        controller = AsyncRetryController(
            replace(reference_policy(), base_backoff_ms=0), tracer_provider=spans.provider
        )
        return await controller.run(
            call, stream=events.append, **{**RUN, "deadline_ms": None, "timeout_ms": 30_000}
        )

    _check(events, asyncio.run(main()), spans)


def test_under_hedging_nothing_is_visible_before_the_winner_commits(spans: Any) -> None:
    policy = replace(reference_policy(), hedging=HedgePolicy(FALLBACK.route_id, 50, 1, 50, 1))
    events: list[StreamEvent] = []
    seen_before_commit: list[int] = []

    async def call(d: Dispatch) -> str:
        assert d.stream is not None
        if d.hedge_ordinal == 0:  # the slow primary streams a little, then stalls
            d.stream.emit("primary part")
            seen_before_commit.append(len(events))
            await asyncio.sleep(5)
            return "never"
        d.stream.emit("hedge ")
        d.stream.emit("answer")
        seen_before_commit.append(len(events))
        return "hedge"

    async def main() -> Any:
        controller = AsyncRetryController(policy, tracer_provider=spans.provider)
        return await controller.run(
            call, stream=events.append, **{**RUN, "deadline_ms": None, "timeout_ms": 30_000}
        )

    result = asyncio.run(main())
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "hedge")
    assert seen_before_commit == [0, 0]  # neither attempt showed anything before the commit
    reader = StreamReader()
    for event in events:
        reader.apply(event)
    assert reader.committed == ("hedge ", "answer")
    assert {e.attempt_ordinal for e in events} == {2}  # the loser's output never appeared
