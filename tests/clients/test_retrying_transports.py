"""A transport that retries on its own (httpx-retries' ``RetryTransport``) sends several
times inside one client send: every one of those sends is a send, whichever way round it
and the retryscope transport are composed, sync and async, with or without the contrib
httpx instrumentation. The server's hit count is the truth."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from httpx_retries import Retry, RetryTransport
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

import retryscope
from retryscope.instrumentation.integrations.httpx import (
    AsyncRetryscopeTransport,
    RetryscopeTransport,
)
from tests.clients.conftest import Seen, fail_first, seen
from tests.instrumentation.conftest import Audit, LocalServer

RETRY = Retry(total=3, allowed_methods=["POST"], status_forcelist=[503])


@pytest.fixture
def contrib(audit: Audit) -> Iterator[None]:
    """The contrib httpx instrumentation on every httpx transport, for this test only."""
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=audit.provider)
    yield
    instrumentor.uninstrument()


def _retrying(asynchronous: bool) -> Any:
    inner = httpx.AsyncHTTPTransport() if asynchronous else httpx.HTTPTransport()
    return RetryTransport(transport=inner, retry=RETRY)


def _retryscope_inside(asynchronous: bool) -> Any:
    """``RetryTransport(transport=RetryscopeTransport())``: the retryscope transport sends."""
    inner = AsyncRetryscopeTransport() if asynchronous else RetryscopeTransport()
    return RetryTransport(transport=inner, retry=RETRY)


def _retryscope_outside(asynchronous: bool) -> Any:
    """``RetryscopeTransport(RetryTransport())``: the retryscope transport wraps the loop."""
    wrap = AsyncRetryscopeTransport if asynchronous else RetryscopeTransport
    return wrap(_retrying(asynchronous))


def _run(audit: Audit, server: LocalServer, transport: Any, *, asynchronous: bool) -> Seen:
    """One harness attempt posting once through a client on ``transport``."""
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary", layer="harness") as attempt,
    ):
        if asynchronous:

            async def post() -> int:
                async with httpx.AsyncClient(transport=transport) as client:
                    return (await client.post(f"{server.url}/v1", content=b"{}")).status_code

            status = asyncio.run(post())
        else:
            with httpx.Client(transport=transport) as client:
                status = client.post(f"{server.url}/v1", content=b"{}").status_code
        attempt.set_outcome("success")
    assert status == 200
    return seen(audit)


def _assert_three_sends(got: Seen, server: LocalServer, audit: Audit) -> None:
    """3 hits, 3 sends of one operation (503, 503, 200), resent by the transport layer, one
    after another (none overlaps the send it is part of)."""
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert audit.rows(
        "SELECT count(*) FROM spans WHERE attributes['retryscope.attempt.overlapping'] NOT NULL"
    ) == [(0,)]
    assert [(parent, op, resend, status) for parent, op, resend, status, *_ in got.sends] == [
        (1, 1, 0, 503),
        (1, 1, 1, 503),
        (1, 1, 2, 200),
    ]
    assert got.retried_layers == ["transport"]
    assert got.report["amplification_ratio"] == 3.0


COMPOSED: dict[str, Callable[[bool], Any]] = {
    "retrying": _retrying,
    "retryscope-inside": _retryscope_inside,
    "retryscope-outside": _retryscope_outside,
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("composed", list(COMPOSED))
def test_each_try_of_a_retrying_transport_is_a_send(
    audit: Audit, server: LocalServer, instrumented: object, composed: str, asynchronous: bool
) -> None:
    fail_first(server)
    transport = COMPOSED[composed](asynchronous)
    _assert_three_sends(_run(audit, server, transport, asynchronous=asynchronous), server, audit)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("composed", list(COMPOSED))
def test_with_the_contrib_instrumentation_its_spans_are_the_sends(
    audit: Audit,
    server: LocalServer,
    instrumented: object,
    contrib: None,
    composed: str,
    asynchronous: bool,
) -> None:
    """The contrib spans around each try are counted once each, not discarded and not
    counted beside the sends retryscope recorded."""
    fail_first(server)
    transport = COMPOSED[composed](asynchronous)
    _assert_three_sends(_run(audit, server, transport, asynchronous=asynchronous), server, audit)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_retryscope_transport_inside_needs_no_instrumentor(
    audit: Audit, server: LocalServer, asynchronous: bool
) -> None:
    fail_first(server)
    transport = _retryscope_inside(asynchronous)
    _assert_three_sends(_run(audit, server, transport, asynchronous=asynchronous), server, audit)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_outside_the_loop_the_contrib_spans_are_its_sends(
    audit: Audit, server: LocalServer, contrib: None, asynchronous: bool
) -> None:
    """No instrumentor: the retryscope transport around the loop becomes a call of the
    three contrib spans beneath it."""
    fail_first(server)
    transport = _retryscope_outside(asynchronous)
    _assert_three_sends(_run(audit, server, transport, asynchronous=asynchronous), server, audit)
    assert audit.rows(
        "SELECT count(*) FROM spans WHERE span_role = 'call' AND layer = 'transport'"
    ) == [(1,)]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_contrib_instrumentation_alone_sees_each_try(
    audit: Audit, server: LocalServer, contrib: None, asynchronous: bool
) -> None:
    """No retryscope integration: the contrib span of each try is a send, its repeats
    resends by method and URL."""
    fail_first(server)
    got = _run(audit, server, _retrying(asynchronous), asynchronous=asynchronous)
    assert len(server.requests) == 3 == got.report["receiver_attempts"]
    assert [resend for _p, _o, resend, *_ in got.sends] == [0, 1, 2]


def test_alone_outside_the_loop_it_sees_one_send(audit: Audit, server: LocalServer) -> None:
    """The known limit: nothing records the tries beneath a retryscope transport wrapped
    around a retrying one (no instrumentor, no contrib instrumentation): one send of three
    hits. ``RetryTransport(transport=RetryscopeTransport())`` sees all three."""
    fail_first(server)
    got = _run(audit, server, _retryscope_outside(False), asynchronous=False)
    assert len(server.requests) == 3
    assert got.report["receiver_attempts"] == 1


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_plain_client_is_one_span_per_send(
    audit: Audit, server: LocalServer, instrumented: object, asynchronous: bool
) -> None:
    """The client send over httpx's own transport is recorded once, on the wire (no call
    span around it), and a harness retry above it stays a harness retry."""
    fail_first(server, failures=1)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(2):
            with req.attempt("primary", layer="harness") as attempt:
                if asynchronous:

                    async def post() -> int:
                        async with httpx.AsyncClient() as client:
                            response = await client.post(f"{server.url}/v1", content=b"{}")
                            return response.status_code

                    status = asyncio.run(post())
                else:
                    with httpx.Client() as client:
                        status = client.post(f"{server.url}/v1", content=b"{}").status_code
                attempt.set_outcome("success" if status == 200 else "unavailable")
    got = seen(audit)
    assert len(server.requests) == 2 == got.report["receiver_attempts"]
    assert audit.rows(
        "SELECT count(*) FROM spans WHERE kind = 'CLIENT' AND layer = 'transport'"
    ) == [(2,)]
    assert got.retried_layers == ["harness"]


@pytest.mark.parametrize("retries", [0, 2])
def test_httpx_connection_retries_are_one_send(
    audit: Audit, server: LocalServer, instrumented: object, retries: int
) -> None:
    """``httpx.HTTPTransport(retries=N)`` retries the connection only (httpcore's
    ``HTTPConnection._connect``): nothing reaches the server before it connects, so a
    request that connects is one send whatever ``retries`` is."""
    fail_first(server, failures=1)
    transport = httpx.HTTPTransport(retries=retries)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(2):
            with req.attempt("primary", layer="harness"), httpx.Client(transport=transport) as c:
                c.post(f"{server.url}/v1", content=b"{}")
    assert len(server.requests) == 2 == seen(audit).report["receiver_attempts"]


def test_refused_connection_retries_are_one_unavailable_send(
    audit: Audit, instrumented: object
) -> None:
    """Three connection tries to a port that refuses them: no request on the wire, one
    send, ``unavailable``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("primary", layer="harness"),
            httpx.Client(transport=httpx.HTTPTransport(retries=2)) as client,
            pytest.raises(httpx.ConnectError),
        ):
            client.get(url)
    assert audit.rows("SELECT outcome_kind FROM attempts WHERE layer = 'transport'") == [
        ("unavailable",)
    ]
