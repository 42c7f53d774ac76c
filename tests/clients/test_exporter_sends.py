"""An exporter's own requests are no sends: the SDK's span processors export with
instrumentation suppressed, and every client integration leaves such a request alone.

The real OTLP/HTTP exporter (requests + urllib3 underneath) behind a ``SimpleSpanProcessor``
exports each span as it ends, inside the attempt, to a collector on 127.0.0.1 that counts
its hits; the instrumentor is on. Without the check every export was recorded as a send of
the attempt, and outside any request as a span of its own, exported again.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import retryscope
from tests.clients.conftest import instrumented
from tests.instrumentation.conftest import Audit, LocalServer

__all__ = ["instrumented"]


def test_an_exporters_requests_are_not_sends(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")
    audit.provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = audit.provider.get_tracer("app")
    with tracer.start_as_current_span("outside any request"):
        pass
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary"),
    ):
        pass
    # one export per ended span: "outside any request", the attempt and the request
    assert len(server.requests) == 3
    assert audit.rows("SELECT count(*) FROM spans WHERE layer = 'transport'") == [(0,)]
    assert sorted(audit.rows("SELECT name FROM spans")) == [
        ("attempt primary",),
        ("logical_request chat",),
        ("outside any request",),
    ]
