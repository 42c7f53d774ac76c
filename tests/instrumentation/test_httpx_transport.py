"""The httpx transport wrapper and the hidden-attempt scenario, end to end through Parquet."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

import retryscope
from retryscope.instrumentation._lower_layer import describe_client
from retryscope.instrumentation.integrations.httpx import (
    AsyncRetryscopeTransport,
    RetryscopeTransport,
    parse_retry_after_hint,
    redact_url,
    send_outcome_kind,
)
from retryscope.vocabulary import OutcomeKind
from tests.instrumentation.conftest import Audit, LocalServer, Reply
from tests.instrumentation.sdk_double import AsyncTinySdk, ProviderError, TinySdk

ALWAYS_503 = Reply(503, (("Retry-After", "1"),), b'{"error":"overloaded"}')


def _harness(audit: Audit, sdk: TinySdk, *, key: str = "idem-key-1") -> str:
    """A harness allowing 3 attempts around the SDK; returns the logical request id."""
    with retryscope.logical_request(
        operation="chat",
        tenant="acme",
        idempotency_key=key,
        request={"prompt": "secret prompt"},
        tracer_provider=audit.provider,
    ) as req:
        for n in range(3):
            with req.attempt("primary", layer="harness", lower=describe_client(sdk)) as a:
                try:
                    sdk.complete()
                except ProviderError:
                    a.set_outcome("unavailable", error="503")
                    a.set_decision("retry" if n < 2 else "stop")
                    continue
                a.set_decision("complete")
                break
        return req.id


def _assert_nine_under_three(audit: Audit, request_id: str) -> None:
    con = audit.connect()
    assert con.execute(
        "SELECT count(*) FROM logical_requests WHERE logical_request_id = ?", [request_id]
    ).fetchone() == (1,)
    harness = con.execute(
        "SELECT attempt_ordinal, lower_max_retries, outcome_kind FROM attempts "
        "WHERE logical_request_id = ? AND layer = 'harness' ORDER BY attempt_ordinal",
        [request_id],
    ).fetchall()
    assert harness == [(n, 2, "unavailable") for n in (1, 2, 3)]
    transport = con.execute(
        "SELECT parent_layer, parent_attempt_ordinal, "
        "list(attempt_ordinal ORDER BY attempt_ordinal), "
        "list(coalesce(http_resend_count, 0) ORDER BY attempt_ordinal), "
        # contrib spans use the older semconv key unless OTEL_SEMCONV_STABILITY_OPT_IN is set
        "list(coalesce(http_status_code, TRY_CAST(attributes['http.status_code'] AS INT)) "
        "ORDER BY attempt_ordinal) "
        "FROM attempts WHERE logical_request_id = ? AND layer = 'transport' "
        "GROUP BY ALL ORDER BY parent_attempt_ordinal",
        [request_id],
    ).fetchall()
    assert [row[:2] for row in transport] == [("harness", n) for n in (1, 2, 3)]
    assert sorted(o for row in transport for o in row[2]) == list(range(1, 10))
    assert all(row[3] == [0, 1, 2] for row in transport)
    assert all(row[4] == [503, 503, 503] for row in transport)
    # each transport span is a child of its harness attempt's span
    assert con.execute(
        "SELECT count(*) FROM attempts t JOIN attempts h ON t.parent_span_id = h.span_id "
        "WHERE t.layer = 'transport' AND h.layer = 'harness' "
        "AND t.parent_attempt_ordinal = h.attempt_ordinal AND t.logical_request_id = ?",
        [request_id],
    ).fetchone() == (9,)
    assert con.execute(
        "SELECT terminal FROM logical_requests WHERE logical_request_id = ?", [request_id]
    ).fetchall() == [("stop_attempt_budget",)]
    assert audit.analysed(request_id) == ({"harness": 3, "transport": 9}, ["harness", "transport"])


def test_scenario_three_harness_attempts_hide_nine_sends(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: ALWAYS_503
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    request_id = _harness(audit, TinySdk(client))
    assert len(server.requests) == 9
    _assert_nine_under_three(audit, request_id)
    con = audit.connect()
    rows = con.execute(
        "SELECT DISTINCT outcome, outcome_kind, error_type, http_method, "
        "attributes['url.full'], attributes['retryscope.http.retry_after'], "
        "attributes['retryscope.http.retry_after_ms'] FROM attempts WHERE layer = 'transport'"
    ).fetchall()
    assert rows == [
        (
            "retryable",
            "unavailable",
            "503",
            "POST",
            f'"{server.url}/v1/chat"',
            '"1"',
            "1000",
        )
    ]
    # the Retry-After a send received is the hint recorded on the next send under it
    hints = con.execute(
        "SELECT list(retry_after_ms ORDER BY attempt_ordinal) FROM attempts "
        "WHERE layer = 'transport' GROUP BY parent_attempt_ordinal"
    ).fetchall()
    assert hints == [([None, 1000, 1000],)] * 3


def test_scenario_with_contrib_httpx_instrumentation(audit: Audit, server: LocalServer) -> None:
    """Without retryscope's transport, the contrib HTTP spans are classified as transport."""
    server.reply = lambda _r: ALWAYS_503
    client = httpx.Client(base_url=server.url)
    HTTPXClientInstrumentor().instrument_client(client, tracer_provider=audit.provider)
    try:
        request_id = _harness(audit, TinySdk(client))
    finally:
        HTTPXClientInstrumentor().uninstrument_client(client)
    _assert_nine_under_three(audit, request_id)
    assert audit.processor.errors == 0


def test_contrib_span_inside_retryscope_transport_is_not_counted_twice(
    audit: Audit, server: LocalServer
) -> None:
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    HTTPXClientInstrumentor().instrument_client(client, tracer_provider=audit.provider)
    try:
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("primary"),
        ):
            client.get("/ok")
    finally:
        HTTPXClientInstrumentor().uninstrument_client(client)
    con = audit.connect()
    assert con.execute("SELECT count(*) FROM attempts WHERE layer = 'transport'").fetchone() == (1,)
    assert audit.analysed(req.id) == ({"harness": 1, "transport": 1}, [])


def test_async_scenario_and_concurrent_requests(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: ALWAYS_503

    async def one(client: httpx.AsyncClient, key: str) -> str:
        sdk = AsyncTinySdk(client)
        with retryscope.logical_request(
            operation="chat", idempotency_key=key, tracer_provider=audit.provider
        ) as req:
            for _ in range(3):
                with req.attempt("primary", lower=describe_client(sdk)) as a:
                    try:
                        await sdk.complete()
                    except ProviderError:
                        a.set_outcome("unavailable")
                        await asyncio.sleep(0)
            return req.id

    async def main() -> list[str]:
        async with httpx.AsyncClient(
            base_url=server.url, transport=AsyncRetryscopeTransport()
        ) as client:
            return list(await asyncio.gather(*(one(client, f"k{i}") for i in range(4))))

    ids = asyncio.run(main())
    for request_id in ids:
        _assert_nine_under_three(audit, request_id)


def test_threaded_harnesses_keep_their_own_requests(audit: Audit, server: LocalServer) -> None:
    server.reply = lambda _r: ALWAYS_503
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    barrier = threading.Barrier(3)

    def run(i: int) -> str:
        barrier.wait()
        return _harness(audit, TinySdk(client), key=f"thread-{i}")

    with ThreadPoolExecutor(3) as pool:
        ids = list(pool.map(run, range(3)))
    for request_id in ids:
        _assert_nine_under_three(audit, request_id)


def test_sends_from_a_thread_with_copied_context_join_the_attempt(
    audit: Audit, server: LocalServer
) -> None:
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary"),
    ):
        ctx = contextvars.copy_context()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(ctx.run, client.get, "/a").result()
    row = (
        audit.connect()
        .execute(
            "SELECT logical_request_id, parent_attempt_ordinal FROM attempts "
            "WHERE layer = 'transport'"
        )
        .fetchone()
    )
    assert row == (req.id, 1)


def test_retryscope_context_never_leaves_in_request_headers(
    audit: Audit, server: LocalServer
) -> None:
    """Neither the wrapper nor the contrib instrumentation (with the default W3C
    traceparent + baggage propagators) writes retryscope context into HTTP headers."""
    plain = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    contrib = httpx.Client(base_url=server.url)
    HTTPXClientInstrumentor().instrument_client(contrib, tracer_provider=audit.provider)
    try:
        with (
            retryscope.logical_request(
                operation="chat",
                tenant="tenant-secret",
                idempotency_key="raw-idempotency-key",
                request={"prompt": "p"},
                tracer_provider=audit.provider,
            ) as req,
            req.attempt("primary", route_release="model@2026-10"),
        ):
            plain.get("/plain")
            contrib.get("/contrib")
    finally:
        HTTPXClientInstrumentor().uninstrument_client(contrib)
    assert len(server.requests) == 2
    forbidden = [
        "retryscope",
        req.id,
        "tenant-secret",
        "raw-idempotency-key",
        "model@2026-10",
        str(req.idempotency_digest),
        str(req.request_digest),
    ]
    for recorded in server.requests:
        blob = "\n".join(f"{k}: {v}" for k, v in recorded.headers.items()).lower()
        for needle in forbidden:
            assert needle.lower() not in blob, (recorded.path, needle)
        assert "baggage" not in recorded.headers


def test_span_outside_a_logical_request_is_a_plain_http_span(
    audit: Audit, server: LocalServer
) -> None:
    client = httpx.Client(
        base_url=server.url, transport=RetryscopeTransport(tracer_provider=audit.provider)
    )
    client.get("/free?api_key=sk-live-123&q=1")
    row = (
        audit.connect()
        .execute(
            "SELECT name, kind, span_role, http_status_code, attributes['url.full'] FROM spans"
        )
        .fetchone()
    )
    assert row == ("GET", "CLIENT", None, 200, f'"{server.url}/free?api_key=REDACTED&q=1"')


def test_connection_refused_is_an_unavailable_transport_attempt(audit: Audit) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = httpx.Client(transport=RetryscopeTransport())
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
    ):
        with pytest.raises(httpx.ConnectError):
            client.get(f"http://127.0.0.1:{port}/")
        a.set_outcome("unavailable")
    assert audit.connect().execute(
        "SELECT outcome_kind, error_type FROM attempts WHERE layer = 'transport'"
    ).fetchone() == ("unavailable", "httpx.ConnectError")


def test_redact_url_removes_credentials_and_secret_query_values() -> None:
    assert (
        redact_url("https://user:pw@api.example.com/v1?key=abc&model=x&Signature=s#frag")
        == "https://REDACTED:REDACTED@api.example.com/v1?key=REDACTED&model=x&Signature=REDACTED"
    )
    assert len(redact_url("http://h/" + "a" * 10_000)) == 2048


def test_parse_retry_after_hint_is_bounded() -> None:
    day = 24 * 3600 * 1000
    assert parse_retry_after_hint("120") == 120_000
    assert parse_retry_after_hint("120", "250") == 250  # retry-after-ms wins when valid
    assert parse_retry_after_hint("2", "-1") == 2000
    assert parse_retry_after_hint("99999999999") == day
    assert parse_retry_after_hint("1" * 65) == day
    assert parse_retry_after_hint("-5") is None
    assert parse_retry_after_hint("soon") is None
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after_hint(date, now_ms=1_445_412_470_000) == 10_000
    assert parse_retry_after_hint(date, now_ms=2_000_000_000_000) == 0


@pytest.mark.parametrize(
    ("status", "idempotent", "kind"),
    [
        (200, False, None),
        (302, False, None),  # a redirect is a completed send; httpx follows with another
        (429, False, OutcomeKind.RATE_LIMITED),
        (503, False, OutcomeKind.UNAVAILABLE),
        (408, False, OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
        (408, True, OutcomeKind.TIMEOUT_BEFORE_RESPONSE),
        (400, False, OutcomeKind.INVALID_REQUEST),
    ],
)
def test_send_outcome_kind(status: int, idempotent: bool, kind: OutcomeKind | None) -> None:
    response = httpx.Response(status)
    assert send_outcome_kind(response, None, idempotent=idempotent) is kind


def test_requests_contrib_spans_are_transport_attempts(audit: Audit, server: LocalServer) -> None:
    import requests
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    server.reply = lambda _r: ALWAYS_503
    RequestsInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
            for _ in range(2):
                with req.attempt("primary") as a:
                    for _ in range(2):
                        requests.get(f"{server.url}/v1", timeout=5)
                    a.set_outcome("unavailable")
    finally:
        RequestsInstrumentor().uninstrument()
    rows = audit.rows(
        "SELECT parent_attempt_ordinal, list(attempt_ordinal ORDER BY attempt_ordinal), "
        "list(coalesce(http_resend_count, 0) ORDER BY attempt_ordinal) FROM attempts "
        "WHERE layer = 'transport' GROUP BY 1 ORDER BY 1"
    )
    assert rows == [(1, [1, 2], [0, 1]), (2, [3, 4], [0, 1])]
    assert audit.analysed()[0] == {"harness": 2, "transport": 4}


def test_unclassified_connect_error_in_a_harness_attempt_is_unavailable(audit: Audit) -> None:
    """classify_exception knows httpx's never-sent errors without importing httpx itself."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = httpx.Client()

    def call() -> None:
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("primary"),
        ):
            client.get(f"http://127.0.0.1:{port}/")

    with pytest.raises(httpx.ConnectError):
        call()
    assert audit.rows("SELECT outcome_kind, error_type FROM attempts") == [
        ("unavailable", "httpx.ConnectError")
    ]


def test_one_send_per_harness_attempt_is_not_a_transport_retry(
    audit: Audit, server: LocalServer
) -> None:
    server.reply = lambda _r: ALWAYS_503
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(3):
            with req.attempt("primary") as a:
                client.get("/v1")
                a.set_outcome("unavailable")
    assert audit.analysed() == ({"harness": 3, "transport": 3}, ["harness"])
