"""OTLP out: the same stamped spans reach any OTLP/HTTP backend through the standard
``BatchSpanProcessor(OTLPSpanExporter(...))`` next to ``AttemptStampingProcessor``."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import retryscope
from retryscope.instrumentation import AttemptStampingProcessor

from .conftest import loopback_http_server


class _Receiver(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        self.server.received.append(ExportTraceServiceRequest.FromString(body))  # type: ignore[attr-defined]
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Receiver, received=[]) as server:
        yield server


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


def test_stamps_arrive_at_an_otlp_http_receiver(receiver: ThreadingHTTPServer) -> None:
    port = receiver.server_address[1]
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces"))
    )
    tracer = provider.get_tracer("app")
    with (
        retryscope.logical_request(
            operation="chat",
            tenant="acme",
            idempotency_key="secret-key",
            request={"q": 1},
            retry_owner="harness",
            tracer_provider=provider,
        ) as req,
        req.attempt(route="primary", layer="harness") as attempt,
    ):
        with tracer.start_as_current_span("http POST"):
            pass
        attempt.set_outcome("success")
    assert provider.force_flush(10_000)
    provider.shutdown()

    spans = {
        span.name: {kv.key: _value(kv.value) for kv in span.attributes}
        for request in receiver.received  # type: ignore[attr-defined]
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }
    child = spans["http POST"]
    logical = next(a for n, a in spans.items() if n.startswith("logical_request"))
    assert child["retryscope.logical_request.id"] == logical["retryscope.logical_request.id"]
    assert child["retryscope.attempt.ordinal"] == 1
    assert child["retryscope.route.id"] == "primary"
    assert child["retryscope.tenant"] == "acme"
    assert len(str(child["retryscope.idempotency.digest"])) == 64
    raw = b"".join(r.SerializeToString() for r in receiver.received)  # type: ignore[attr-defined]
    assert b"secret-key" not in raw
