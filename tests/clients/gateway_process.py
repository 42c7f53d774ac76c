"""A gateway in its own process, for the cross-process tests: it serves HTTP on 127.0.0.1,
continues each request it receives and retries its upstream with an adapter loop (up to
3 tries), writing its own Parquet.

Usage: ``python gateway_process.py OUT_DIR UPSTREAM_URL MODE``. MODE ``extract`` continues
the logical request with ``retryscope.extract`` and opens an adapter attempt per try;
``traceparent`` reads only the W3C trace context and sends through the contrib httpx
instrumentation (no retryscope API). It prints its port, serves until stdin closes, then
flushes its spans and prints how many requests it served.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from opentelemetry import context, propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import retryscope

TRIES = 3

out, upstream, mode = sys.argv[1:4]
exporter = retryscope.ParquetSpanExporter(out)
provider = TracerProvider()
provider.add_span_processor(retryscope.AttemptStampingProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
if mode == "extract":
    from retryscope.instrumentation import RetryscopeInstrumentor

    RetryscopeInstrumentor().instrument()
else:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("gateway")
served = 0
lock = threading.Lock()


def forward(client: httpx.Client, body: bytes) -> int:
    """Up to TRIES sends upstream: the status of the last."""
    status = 0
    for _ in range(TRIES):
        status = client.post(upstream, content=body).status_code
        if status == 200:
            break
    return status


def continued(headers: dict[str, str], body: bytes) -> int:
    with retryscope.extract(headers, tracer_provider=provider) as req, httpx.Client() as client:
        for _ in range(TRIES):
            with req.attempt("upstream", layer="adapter") as attempt:
                status = client.post(upstream, content=body).status_code
                if status == 200:
                    return status
                attempt.set_outcome("unavailable")
    return status


def traced(headers: dict[str, str], body: bytes) -> int:
    token = context.attach(propagate.extract(headers))
    try:
        with (
            tracer.start_as_current_span("POST /v1/chat", kind=trace.SpanKind.SERVER),
            httpx.Client() as client,
        ):
            return forward(client, body)
    finally:
        context.detach(token)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_POST(self) -> None:
        global served
        with lock:
            served += 1
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        status = (continued if mode == "extract" else traced)(headers, body)
        reply = b"{}" if status == 200 else b'{"error":"upstream"}'
        self.send_response(200 if status == 200 else 502)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
print(httpd.server_address[1], flush=True)
sys.stdin.read()
httpd.shutdown()
provider.shutdown()
exporter.force_flush()
print(served, flush=True)
