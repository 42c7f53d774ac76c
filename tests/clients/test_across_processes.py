"""Across processes the request is one tree: a harness (2 attempts) in this process calls a
gateway process (tests/clients/gateway_process.py) that retries its upstream, a
hit-counting server on 127.0.0.1 (3 tries, then 2). The gateway writes its own Parquet; the
report over both processes' data counts every hit once, nests the gateway's attempts under
the harness attempt that called it and multiplies 2 x 3, with no anomaly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import retryscope
from retryscope.analytics import build_report, findings
from tests.clients.conftest import seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

GATEWAY = Path(__file__).with_name("gateway_process.py")


@contextmanager
def gateway(out: Path, upstream: str, mode: str) -> Iterator[tuple[str, list[int]]]:
    """The gateway process's URL while it runs, and (once it stopped) how many requests
    it served."""
    proc = subprocess.Popen(
        [sys.executable, str(GATEWAY), str(out), upstream, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    served: list[int] = []
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1/chat", served
    finally:
        proc.stdin.close()
        served.append(int(proc.stdout.readline()))
        assert proc.wait(timeout=30) == 0


def harness(audit: Audit, url: str, *, carry: bool) -> str:
    """Two harness attempts through the gateway (the second after a 502), the retryscope
    carrier injected in each when ``carry``; the request id."""
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        httpx.Client() as client,
    ):
        for _ in range(2):
            with req.attempt("call", layer="harness") as attempt:
                headers: dict[str, str] = {}
                if carry:
                    assert retryscope.inject(headers)
                if client.post(url, headers=headers, content=b'{"q":1}').status_code == 200:
                    break
                attempt.set_outcome("unavailable")
    return req.id


def test_a_gateway_process_continuing_the_request_is_one_tree(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    server.reply = lambda _r: Reply(503) if len(server.requests) <= 4 else Reply(200)
    with gateway(audit.directory / "gateway", server.url, "extract") as (url, served):
        request_id = harness(audit, url, carry=True)
    hits = served[0] + len(server.requests)
    assert (served[0], len(server.requests)) == (2, 5)
    got = seen(audit, request_id)
    assert got.report["logical_requests"] == 1
    assert got.report["receiver_attempts"] == hits == 7
    assert got.retried_layers == ["harness", "adapter"]
    assert got.report["amplification"]["max_nested_multiplication"] == 6
    con = audit.connect()
    rules = findings(con).column("rule_id").to_pylist()
    assert "telemetry_anomaly" not in rules
    assert "nested_retry_owners" in rules
    # the gateway's adapter tries, in two continuations, under the harness attempt that
    # called it (in the other process); its sends under its own adapter tries
    continued = con.execute(
        "SELECT layer, attempt_ordinal, parent_layer, parent_attempt_ordinal, "
        "parent_continuation IS NOT DISTINCT FROM continuation, "
        "dense_rank() OVER (ORDER BY continuation) FROM attempts "
        "WHERE continuation IS NOT NULL ORDER BY start_time"
    ).fetchall()
    assert [r[:4] for r in continued] == [
        ("adapter", 1, "harness", 1),
        ("transport", 1, "adapter", 1),
        ("adapter", 2, "harness", 1),
        ("transport", 2, "adapter", 2),
        ("adapter", 3, "harness", 1),
        ("transport", 3, "adapter", 3),
        ("adapter", 1, "harness", 2),
        ("transport", 2, "adapter", 1),
        ("adapter", 2, "harness", 2),
        ("transport", 3, "adapter", 2),
    ]
    assert [r[4] for r in continued] == [False, True] * 5  # harness: the origin's
    assert [r[5] for r in continued] in ([1] * 6 + [2] * 4, [2] * 6 + [1] * 4)
    assert con.execute("SELECT count(DISTINCT trace_id) FROM spans").fetchone() == (1,)


@pytest.fixture
def contrib_httpx(audit: Audit) -> Iterator[None]:
    """The contrib httpx instrumentation in this process (it injects W3C trace context)."""
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().instrument(tracer_provider=audit.provider)
    yield
    HTTPXClientInstrumentor().uninstrument()


def test_a_gateway_with_trace_context_alone_joins_through_the_trace_parent(
    audit: Audit, server: LocalServer, contrib_httpx: None
) -> None:
    """The gateway uses no retryscope API: a server span continuing the W3C trace context
    and the contrib httpx instrumentation's client spans, its retry loop unmarked. The model
    joins its sends to the request through their trace parent, beneath the harness's send
    that carried the context (so the receiver's sends are the upstream's hits)."""
    server.reply = lambda _r: Reply(503) if len(server.requests) <= 4 else Reply(200)
    with gateway(audit.directory / "gateway", server.url, "traceparent") as (url, served):
        request_id = harness(audit, url, carry=False)
    assert (served[0], len(server.requests)) == (2, 5)
    got = seen(audit, request_id)
    assert got.report["logical_requests"] == 1
    assert got.report["receiver_attempts"] == len(server.requests) == 5
    assert got.retried_layers == ["harness", "transport"]
    assert got.report["amplification"]["max_nested_multiplication"] == 6
    con = audit.connect()
    rules = findings(con).column("rule_id").to_pylist()
    assert "telemetry_anomaly" not in rules
    assert "missing_ordinals" not in rules
    sends = con.execute(
        "SELECT parent_layer, parent_attempt_ordinal, http_status_code, is_leaf "
        "FROM attempt_facts WHERE layer = 'transport' ORDER BY start_time"
    ).fetchall()
    assert sends == [
        ("harness", 1, 502, False),
        *[("transport", 1, 503, True)] * 3,
        ("harness", 2, 200, False),
        ("transport", 2, 503, True),
        ("transport", 2, 200, True),
    ]


def test_only_the_outermost_send_of_a_trace_context_process_is_adopted(audit: Audit) -> None:
    """In the other process, a client span beneath its own send is that send's lower
    layer (one send on the wire), and a client span in a trace of no request stays
    outside the request: an implicit request of its own."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    other = TracerProvider()  # no stamping processor: it knows nothing of retryscope
    exporter = retryscope.ParquetSpanExporter(audit.directory / "other")
    other.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = other.get_tracer("other")
    post = {"http.request.method": "POST", "http.response.status_code": 503}
    with retryscope.logical_request(operation="o", tracer_provider=audit.provider) as req:
        with req.attempt("call") as attempt:
            context = trace.set_span_in_context(attempt.span)
            with tracer.start_as_current_span(
                "server", context=context, kind=trace.SpanKind.SERVER
            ):
                for _ in range(2):
                    with tracer.start_as_current_span("POST", kind=trace.SpanKind.CLIENT) as s:
                        s.set_attributes(post)
                        with tracer.start_span("POST", kind=trace.SpanKind.CLIENT) as inner:
                            inner.set_attributes(post)
    with tracer.start_span("POST", kind=trace.SpanKind.CLIENT) as stray:
        stray.set_attributes(post)
    other.shutdown()
    con = audit.connect()
    report = build_report(con)
    assert (report["receiver_attempts"], report["implicit_requests"]) == (3, 1)
    assert con.execute(
        "SELECT layer, attempt_ordinal, parent_layer, parent_attempt_ordinal, group_size "
        "FROM attempt_facts WHERE NOT rs_implicit(logical_request_id) ORDER BY start_time"
    ).fetchall() == [
        ("harness", 1, None, None, 1),
        *[("transport", n, "harness", 1, 2) for n in (1, 2)],
    ]
