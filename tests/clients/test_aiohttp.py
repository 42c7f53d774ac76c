"""aiohttp: every send of every ``ClientSession`` is a send, aiohttp-retry's tries are
resends of one operation by layer ``transport``, with or without the contrib aiohttp-client
instrumentation. The server's hit count is the truth."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp_retry import ExponentialRetry, RetryClient
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

import retryscope
from retryscope.instrumentation import RetryscopeInstrumentor
from retryscope.instrumentation.integrations.aiohttp import middleware, trace_config
from tests.clients.conftest import Seen, fail_first, seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

RETRY = ExponentialRetry(attempts=3, statuses={503}, start_timeout=0.001)
Session = Callable[[], aiohttp.ClientSession]


@pytest.fixture
def contrib(audit: Audit) -> Iterator[None]:
    """The contrib aiohttp-client instrumentation on every new session, for this test only."""
    instrumentor = AioHttpClientInstrumentor()
    instrumentor.instrument(tracer_provider=audit.provider)
    yield
    instrumentor.uninstrument()


@pytest.fixture
def refusing() -> Iterator[str]:
    """A port bound on 127.0.0.1 but not listening: every connect is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _instrumented_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


def _explicit_session() -> aiohttp.ClientSession:
    """No instrumentor: the middleware and trace config passed by hand."""
    return aiohttp.ClientSession(middlewares=[middleware], trace_configs=[trace_config()])


def _in_attempt(audit: Audit, calls: Callable[[], Awaitable[list[int]]]) -> list[int]:
    """Run ``calls`` in one harness attempt of one logical request."""
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary", layer="harness"),
    ):
        return asyncio.run(calls())


def _retried(server: LocalServer, session: Session, posts: int = 1) -> Callable[[], Any]:
    async def calls() -> list[int]:
        statuses = []
        async with RetryClient(client_session=session(), retry_options=RETRY) as client:
            for _ in range(posts):
                async with client.post(f"{server.url}/v1", data=b"{}") as response:
                    statuses.append(response.status)
        return statuses

    return calls


def _assert_three_sends(got: Seen, server: LocalServer) -> None:
    """3 hits, 3 sends of one operation (503, 503, 200), resent by the transport layer."""
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert [
        (parent, op, resend, status, layer) for parent, op, resend, status, layer, *_ in got.sends
    ] == [
        (1, 1, 0, 503, None),
        (1, 1, 1, 503, "transport"),
        (1, 1, 2, 200, "transport"),
    ]
    assert got.retried_layers == ["transport"]
    assert got.report["amplification_ratio"] == 3.0


@pytest.fixture
def instrumented() -> Iterator[RetryscopeInstrumentor]:
    """Only the aiohttp integration of the instrumentor (LiteLLM's import hook and the
    others are not needed here)."""
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument(skip=("httpx", "httpx2", "urllib3", "grpc", "litellm", "stamina"))
    assert instrumentor.enabled == ("aiohttp",)
    yield instrumentor
    instrumentor.uninstrument()


def test_each_try_of_aiohttp_retry_is_a_send(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    fail_first(server)
    assert _in_attempt(audit, _retried(server, _instrumented_session)) == [200]
    _assert_three_sends(seen(audit), server)
    assert {r.headers.get("traceparent") for r in server.requests} == {None}


def test_with_the_contrib_instrumentation_its_spans_are_calls(
    audit: Audit, server: LocalServer, instrumented: object, contrib: None
) -> None:
    """The contrib span of each try wraps that try's send: a call, not a second send."""
    fail_first(server)
    _in_attempt(audit, _retried(server, _instrumented_session))
    _assert_three_sends(seen(audit), server)
    assert audit.rows("SELECT count(*) FROM spans WHERE span_role = 'call'") == [(3,)]


@pytest.mark.usefixtures("contrib")
def test_the_middleware_by_hand_needs_no_instrumentor(audit: Audit, server: LocalServer) -> None:
    fail_first(server)
    _in_attempt(audit, _retried(server, _explicit_session))
    _assert_three_sends(seen(audit), server)


def test_without_retryscope_the_contrib_spans_are_the_sends(
    audit: Audit, server: LocalServer, contrib: None
) -> None:
    """The contrib instrumentation alone sees each try of aiohttp-retry (one span per
    ``session.request``), but not their operation: they read as resends by digest."""
    fail_first(server)
    _in_attempt(audit, _retried(server, aiohttp.ClientSession))
    got = seen(audit)
    assert len(server.requests) == 3 == got.report["receiver_attempts"]


def test_a_new_call_is_a_new_operation(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """Two calls of the same request, each answered at once: aiohttp-retry's try 1 of the
    second call is a new operation, not a resend of the first (amplification 1.0)."""
    assert _in_attempt(audit, _retried(server, _instrumented_session, posts=2)) == [200, 200]
    got = seen(audit)
    assert len(server.requests) == 2 == got.report["receiver_attempts"]
    assert [(op, resend) for _p, op, resend, *_ in got.sends] == [(1, 0), (2, 0)]
    assert got.report["amplification_ratio"] == 1.0


def test_each_redirect_hop_is_a_send(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """One ``session.get`` that follows a redirect sends twice: two sends, two operations."""
    server.reply = lambda r: Reply(302, (("Location", "/v2"),)) if r.path == "/v1" else Reply()

    async def calls() -> list[int]:
        async with aiohttp.ClientSession() as session, session.get(f"{server.url}/v1") as r:
            return [r.status]

    assert _in_attempt(audit, calls) == [200]
    got = seen(audit)
    assert [r.path for r in server.requests] == ["/v1", "/v2"]
    assert got.report["receiver_attempts"] == 2
    assert [(op, resend, status) for _p, op, resend, status, *_ in got.sends] == [
        (1, 0, 302),
        (2, 0, 200),
    ]


def test_a_harness_retry_over_a_session(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """No retry library: the harness retries, each of its attempts one send."""
    fail_first(server, failures=1)

    async def send() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{server.url}/v1", data=b"{}") as response:
                return response.status

    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(2):
            with req.attempt("primary", layer="harness") as attempt:
                status = asyncio.run(send())
                attempt.set_outcome("success" if status == 200 else "unavailable")
    got = seen(audit)
    assert len(server.requests) == 2 == got.report["receiver_attempts"]
    assert [(parent, resend) for parent, _o, resend, *_ in got.sends] == [(1, 0), (2, 0)]
    assert got.retried_layers == ["harness"]


def test_a_refused_connection_is_an_unavailable_send(
    audit: Audit, instrumented: object, refusing: str
) -> None:
    async def calls() -> list[int]:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorError):
                await session.get(refusing)
        return []

    _in_attempt(audit, calls)
    assert audit.rows("SELECT outcome_kind FROM attempts WHERE layer = 'transport'") == [
        ("unavailable",)
    ]


def test_uninstrument_leaves_new_sessions_alone(audit: Audit, server: LocalServer) -> None:
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument(skip=("httpx", "httpx2", "urllib3", "grpc", "litellm", "stamina"))
    instrumentor.uninstrument()

    async def calls() -> list[int]:
        async with aiohttp.ClientSession() as session, session.get(server.url) as r:
            return [r.status]

    _in_attempt(audit, calls)
    assert audit.rows("SELECT count(*) FROM spans WHERE layer = 'transport'") == [(0,)]
