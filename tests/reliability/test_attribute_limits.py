"""Join keys survive a span attribute count limit.

``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT=32`` (Google Cloud Trace's per-span limit) makes the SDK
evict a span's oldest attribute for each one beyond 32. Attempts that carry many
attributes (GenAI, usage, cost, the application's own) and sends whose instrumentation
adds many after they start (opentelemetry-instrumentation-httpx capturing every response
header) must still join their request and attempt, so the figures stay exact.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from retryscope.analytics import amplification, connect
from retryscope.instrumentation import (
    AttemptStampingProcessor,
    ParquetSpanExporter,
    logical_request,
)
from tests.conftest import loopback_http_server

REQUESTS = 10
HEADERS = 20  # response headers the instrumentation captures after the send started


class _ManyHeaders(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        for i in range(self.server.headers):  # type: ignore[attr-defined]
            self.send_header(f"x-trace-{i}", str(i))
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


def _record(directory: Path, app_attributes: int, headers: int = HEADERS) -> int:
    """Ten requests of two harness attempts, each with one httpx send, into ``directory``;
    the sends the processor counted as unjoined."""
    exporter = ParquetSpanExporter(directory)
    provider = TracerProvider()
    processor = AttemptStampingProcessor()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = httpx.Client()
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument_client(client, tracer_provider=provider)
    try:
        with loopback_http_server(_ManyHeaders, headers=headers) as server:
            url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat"
            for i in range(REQUESTS):
                with logical_request(
                    operation="chat",
                    tenant="acme",
                    idempotency_key=f"order-{i}",
                    request={"i": i},
                    tracer_provider=provider,
                ) as req:
                    for route in ("primary", "secondary"):
                        with req.attempt(route, route_release="model-1") as attempt:
                            client.post(url, json={"i": i, "route": route})
                            attempt.set_gen_ai(
                                provider="openai",
                                request_model="gpt",
                                response_model="gpt",
                                operation="chat",
                                response_id=f"r{i}",
                            )
                            attempt.set_usage(input_tokens=10, output_tokens=5)
                            attempt.set_cost(reserved=10, actual=5)
                            attempt.set_attributes(
                                {f"app.key{j}": j for j in range(app_attributes)}
                            )
                            if route == "primary":
                                attempt.set_outcome("retryable", "rate_limited")
                    req.span.set_attributes({f"app.req{j}": j for j in range(2 * app_attributes)})
    finally:
        instrumentor.uninstrument_client(client)
    assert provider.force_flush()
    assert exporter.force_flush()
    provider.shutdown()
    return processor.unjoined


def _read(directory: Path) -> tuple[dict[str, int], list[tuple[object, ...]], object]:
    """(least attributes dropped per attempt layer, attempts per layer and outcome, the
    amplification figures), with every span joined to its request."""
    con, _ = connect(directory)
    figures = amplification(con).to_pylist()[0]  # (builds the model)
    unjoined = con.sql("SELECT count(*) FROM spans WHERE logical_request_id IS NULL")
    assert unjoined.fetchall() == [(0,)]
    dropped = con.sql(
        "SELECT coalesce(layer, span_role), min(dropped_attributes) FROM spans GROUP BY 1"
    ).fetchall()
    outcomes = con.sql(
        "SELECT layer, outcome, count(*) FROM attempt_facts GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    return dict(dropped), outcomes, figures  # type: ignore[arg-type]


@pytest.mark.parametrize("app_attributes", [0, 20])
def test_join_keys_survive_the_span_attribute_count_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_attributes: int
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE", "x-trace-.*")
    _record(tmp_path / "unlimited", app_attributes)
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "32")
    assert _record(tmp_path / "limited", app_attributes) == 0
    dropped, outcomes, figures = _read(tmp_path / "limited")
    assert dropped["transport"] > 0  # the limit evicted attributes of every send
    if app_attributes:
        assert dropped["harness"] > 0  # and of every attempt
        assert dropped["logical_request"] > 0  # and of every request
    assert outcomes == [
        ("harness", "retryable", REQUESTS),
        ("harness", "success", REQUESTS),
        ("transport", "success", 2 * REQUESTS),
    ]
    assert figures["physical_attempts"] == 4 * REQUESTS
    unlimited_dropped, unlimited_outcomes, unlimited_figures = _read(tmp_path / "unlimited")
    assert set(unlimited_dropped.values()) == {0}
    assert (outcomes, figures) == (unlimited_outcomes, unlimited_figures)


def test_sends_that_lose_their_request_to_the_limit_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instrumentation that adds more attributes after the send started than the limit
    holds evicts every stamp: those sends cannot join their request, and are counted."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE", "x-trace-.*")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "32")
    assert _record(tmp_path / "spans", 0, headers=40) == 2 * REQUESTS
    con, _ = connect(tmp_path / "spans")
    unjoined = con.sql("SELECT count(*) FROM spans WHERE logical_request_id IS NULL")
    assert unjoined.fetchall() == [(2 * REQUESTS,)]
