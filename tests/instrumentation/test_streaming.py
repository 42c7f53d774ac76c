"""The streaming wrapper against a real chunked HTTP response (sync and async)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

import retryscope
from retryscope.instrumentation import astream, stream
from tests.instrumentation.conftest import Audit, LocalServer, Reply

CHUNKS = (b"data: one\n\n", b"data: two\n\n", b"data: three\n\n")


def _row(audit: Audit) -> tuple[object, ...]:
    row = (
        audit.connect()
        .execute(
            "SELECT outcome, outcome_kind, stream_events, attributes['retryscope.stream.bytes'], "
            "attributes['retryscope.stream.state'], "
            "attributes['retryscope.stream.first_event_ms'] IS NOT NULL "
            "FROM attempts WHERE layer = 'harness'"
        )
        .fetchone()
    )
    assert row is not None
    return row


def _consume(audit: Audit, server: LocalServer, delivered: list[bytes]) -> None:
    """One attempt streaming ``/sse`` into ``delivered``."""
    with (
        httpx.Client(base_url=server.url) as client,
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
        client.stream("GET", "/sse") as response,
    ):
        delivered.extend(stream(a, response.iter_raw()))


async def _aconsume(audit: Audit, server: LocalServer, delivered: list[bytes]) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("primary") as a,
        ):
            async with client.stream("GET", "/sse") as response:
                async for chunk in astream(a, response.aiter_raw()):
                    delivered.append(chunk)


def test_completed_stream(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: Reply(chunks=CHUNKS)
    delivered: list[bytes] = []
    _consume(audit, server, delivered)
    got = b"".join(delivered)
    assert got == b"".join(CHUNKS)
    assert _row(audit) == ("success", None, len(CHUNKS), str(len(got)), '"completed"', True)


def test_failure_after_output_is_stream_interrupted(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: Reply(chunks=CHUNKS[:2], cut_after_chunks=True)
    delivered: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        _consume(audit, server, delivered)
    assert b"".join(delivered) == b"".join(CHUNKS[:2])
    outcome, kind, events, size, state, _ = _row(audit)
    assert (outcome, kind, events, state) == (
        "indeterminate",
        "stream_interrupted_after_output",
        2,
        '"interrupted_after_output"',
    )
    assert size == str(len(b"".join(CHUNKS[:2])))
    assert audit.connect().execute("SELECT terminal FROM logical_requests").fetchone() == (
        "stop_indeterminate",
    )


def _broken() -> Iterator[str]:
    raise ConnectionRefusedError("refused")
    yield "never"  # makes this a generator


def _consume_broken(audit: Audit) -> None:
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
    ):
        list(stream(a, _broken()))


def test_failure_before_output_is_classified_as_usual(audit: Audit) -> None:
    with pytest.raises(ConnectionRefusedError):
        _consume_broken(audit)
    assert _row(audit)[:5] == ("retryable", "unavailable", 0, "0", '"failed_before_output"')


def test_abandoned_stream(audit: Audit) -> None:
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
    ):
        it = stream(a, iter(["a", "bb", "ccc"]))
        assert next(it) == "a"
        it.close()
    assert _row(audit)[2:5] == (1, "1", '"abandoned"')


def test_async_stream_interrupted(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: Reply(chunks=CHUNKS[:1], cut_after_chunks=True)
    delivered: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(_aconsume(audit, server, delivered))
    assert delivered == [CHUNKS[0]]
    assert _row(audit)[1:3] == ("stream_interrupted_after_output", 1)
