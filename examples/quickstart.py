"""retryscope quick start: a harness's retries and fallbacks, recorded as auditable Parquet.

    python examples/quickstart.py DATA_DIR
    retryscope report DATA_DIR            # needs: pip install 'retryscope[analytics]'

A tiny fake provider listens on 127.0.0.1 with two routes; the primary answers 503 to every
other request. Each logical request tries the primary twice (with a backoff between), then
falls back to the secondary route, declared with ``route_priority=1``: that is what makes an
attempt a fallback in the data. Six requests, three of which fall back: the report shows a
50 % fallback rate and 12 physical attempts for 6 logical requests. Only the core package
is needed (no HTTP client library: the harness uses urllib).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import retryscope
from retryscope import AttemptStampingProcessor, ParquetSpanExporter
from retryscope.instrumentation import GapCountingBatchSpanProcessor

ROUTES = (  # route id, route priority (0 = primary), release
    ("primary", 0, "model-a@2026-10"),
    ("fallback", 1, "model-b@2026-09"),
)
TRIES = {"primary": 2, "fallback": 1}
BACKOFF_MS = 20
REQUESTS = 6


class FakeProvider(BaseHTTPRequestHandler):
    """``POST /<route>``: the primary fails (503, ``retry-after-ms``) for even request
    numbers; everything else answers 200."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        failing = self.path == "/primary" and body["n"] % 2 == 0
        answer = b'{"error": "overloaded"}' if failing else b'{"text": "hello"}'
        self.send_response(503 if failing else 200)
        if failing:
            self.send_header("retry-after-ms", str(BACKOFF_MS))
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def post(url: str, payload: dict[str, Any]) -> tuple[int, dict[str, str]]:
    """POST ``payload`` as JSON: the status and the response headers."""
    if not url.startswith("http://"):
        raise ValueError(f"not an http:// URL: {url}")
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def ask(base_url: str, n: int, provider: TracerProvider) -> bool:
    """One logical request: up to two tries on the primary, then the fallback."""
    payload = {"n": n, "prompt": "Summarise ticket INC-4711"}
    with retryscope.logical_request(
        operation="chat",
        tenant="acme",
        idempotency_key=f"order-{n}",  # digested, never stored
        request=payload,  # digested (canonical JSON + SHA-256), never stored
        deadline=time.time_ns() + 5_000_000_000,  # absolute; never reset per attempt
        retry_owner="harness",
        tracer_provider=provider,
    ) as req:
        retry_after_ms: int | None = None
        for route, priority, release in ROUTES:
            for route_try in range(TRIES[route]):
                last = route_try == TRIES[route] - 1
                with req.attempt(
                    route, route_release=release, route_priority=priority, layer="harness"
                ) as attempt:
                    if req.attempts:  # not the first attempt: record the wait before it
                        attempt.set_backoff(delay_ms=BACKOFF_MS, retry_after_ms=retry_after_ms)
                    status, headers = post(f"{base_url}/{route}", payload)
                    if status == 200:
                        attempt.set_outcome("success")
                        attempt.set_cost(reserved=2_000, actual=1_350, currency="USD")
                        attempt.set_decision("complete")
                        return True
                    kind = "rate_limited" if status == 429 else "unavailable"
                    attempt.set_outcome("retryable", kind, http_status=status)
                    attempt.set_cost(reserved=2_000, actual=0, currency="USD")
                    attempt.set_decision("fallback" if last else "retry")
                    hint = headers.get("retry-after-ms")
                    retry_after_ms = int(hint) if hint and hint.isdigit() else None
                time.sleep(max(BACKOFF_MS, retry_after_ms or 0) / 1000)
        return False


def main(out: str) -> int:
    exporter = ParquetSpanExporter(out)
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())  # stamps third-party spans too
    provider.add_span_processor(GapCountingBatchSpanProcessor(exporter))
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeProvider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        answered = sum(ask(base_url, n, provider) for n in range(REQUESTS))
    finally:
        server.shutdown()
        provider.shutdown()  # flushes the batch processor and the exporter's files
    print(f"{answered} of {REQUESTS} requests answered; spans written under {out}")
    print(f"next: retryscope report {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DATA_DIR")
    sys.exit(main(sys.argv[1]))
