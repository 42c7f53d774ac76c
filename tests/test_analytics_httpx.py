"""Transport attempts classified from the spans the real httpx instrumentation makes."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

from retryscope.analytics import amplification, request_attempts
from tests.recorder import T0, Clock, Recorder


class _Flaky(http.server.BaseHTTPRequestHandler):
    """503 on the first request of each path, 200 after."""

    seen: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        first = self.path not in self.seen
        self.seen.add(self.path)
        self.send_response(503 if first else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


def test_httpx_resends_inside_one_harness_attempt_are_transport_attempts(
    recorder: Recorder, server: str
) -> None:
    clock = Clock(T0)
    client = httpx.Client(transport=httpx.HTTPTransport(retries=0))
    HTTPXClientInstrumentor.instrument_client(client, tracer_provider=recorder.provider)
    try:
        with (
            recorder.request(clock, logical_request_id="hx") as req,
            req.attempt("primary", layer="harness") as a,
        ):
            statuses = [client.post(f"{server}/v1/chat").status_code for _ in range(2)]
            a.set_outcome("success")
    finally:
        HTTPXClientInstrumentor.uninstrument_client(client)
        client.close()
    assert statuses == [503, 200]
    con = recorder.connect()
    row = amplification(con).to_pylist()[0]
    assert (row["physical_attempts"], row["harness_attempts"], row["receiver_attempts"]) == (
        3,
        1,
        2,
    )
    attempts = request_attempts(con, "hx").to_pylist()
    transport = [a for a in attempts if a["layer"] == "transport"]
    assert [(a["outcome"], a["outcome_kind"], a["http_status_code"]) for a in transport] == [
        ("retryable", "unavailable", 503),
        ("success", None, 200),
    ]
    assert {(a["parent_layer"], a["parent_attempt_ordinal"]) for a in transport} == {("harness", 1)}
    # the stamping processor marked them as transport attempts when they started; the
    # analytics derived their outcome from the HTTP status
    assert not any(a["classified_from_http"] for a in transport)
