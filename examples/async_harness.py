"""retryscope asyncio harness: one policy, many concurrent requests, shared protection.

    python examples/async_harness.py DATA_DIR
    retryscope report DATA_DIR            # needs: pip install 'retryscope[analytics]'

A fake provider listens on 127.0.0.1 with two routes. The private primary answers its first
30 requests with 503 (an outage); the external fallback answers. Forty requests run at once
through one ``AsyncRetryController``: one policy, validated once, each request binding its
own payload, idempotency key and deadline at admission. All of them share the policy's
retry budget (concurrent retries stay within half of the requests in flight, at least three)
and the primary's circuit breaker (it opens once half of ten outcomes failed, and lets a
probe through after its break), so the outage costs a bounded number of extra attempts and
later requests go straight to the fallback. The provider counts every request it receives:
that count equals the attempts in the receipts and in the Parquet data. Only the core
package is needed (the HTTP calls are urllib in a worker thread).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from retryscope import AttemptStampingProcessor, OutcomeKind, ParquetSpanExporter
from retryscope.control import (
    AsyncRetryController,
    AttemptFailed,
    BehaviorEvidence,
    CallResult,
    CapabilityContract,
    CircuitBreakerPolicy,
    Dispatch,
    FallbackRoute,
    Modality,
    OutputMode,
    RetryBudgetPolicy,
    RetryPolicy,
    RunResult,
)
from retryscope.instrumentation import GapCountingBatchSpanProcessor
from retryscope.vocabulary import DataBoundary, RetryOwner

REQUESTS = 40
HITS: Counter[str] = Counter()
LOCK = threading.Lock()


class FakeProvider(BaseHTTPRequestHandler):
    """``POST /<route>``: the primary answers 503 to its first 30 requests, 200 after."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        route = self.path.strip("/")
        with LOCK:
            HITS[route] += 1
            down = route == "private-primary" and HITS[route] <= 30
        time.sleep(0.02)  # service time
        body = json.dumps({"route": route, "severity": "high"}).encode()
        self.send_response(503 if down else 200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class Listener(ThreadingHTTPServer):
    request_queue_size = 128  # forty connects at once: queue them all, refuse none
    daemon_threads = True


def label(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


NEEDED = CapabilityContract(
    input_modalities=frozenset({Modality.TEXT}),
    output_modalities=frozenset({Modality.TEXT}),
    context_tokens=8_000,
    output_tokens=1_000,
    output_mode=OutputMode.JSON_SCHEMA,
    output_schema_sha256=label("schema:incident-severity/v1"),
    tools=frozenset(),
    stream_terminal_event=False,
    stream_usage_event=False,
    regions=frozenset({"eu-west-1", "eu-central-1"}),
    retention_days=30,
)


def route(route_id: str, priority: int, boundary: DataBoundary, region: str) -> FallbackRoute:
    return FallbackRoute(
        route_id=route_id,
        route_release_sha256=label(f"release:{route_id}/2026-10-01"),
        capability=CapabilityContract(
            input_modalities=frozenset({Modality.TEXT}),
            output_modalities=frozenset({Modality.TEXT}),
            context_tokens=32_000,
            output_tokens=2_048,
            output_mode=OutputMode.JSON_SCHEMA,
            output_schema_sha256=NEEDED.output_schema_sha256,
            tools=frozenset(),
            stream_terminal_event=True,
            stream_usage_event=True,
            regions=frozenset({region}),
            retention_days=0,
        ),
        behavior_class_sha256=label("behavior:incident-severity-contract/v1"),
        behavior_evidence=BehaviorEvidence(label(f"eval:{route_id}"), 4_102_444_800_000),
        data_boundary=boundary,
        priority=priority,
        max_attempts=3 if priority == 0 else 1,
        supports_idempotency=True,
        max_attempt_cost_micros=2_000,
    )


POLICY = RetryPolicy(
    retry_owner=RetryOwner.HARNESS,
    capability=NEEDED,
    behavior_class_sha256=label("behavior:incident-severity-contract/v1"),
    max_data_boundary=DataBoundary.EXTERNAL_PROVIDER,
    base_backoff_ms=20,
    max_backoff_ms=200,
    max_retry_after_ms=1_000,
    max_total_attempts=4,
    max_total_cost_micros=10_000,
    routes=(
        route("private-primary", 0, DataBoundary.PRIVATE_SERVICE, "eu-west-1"),
        route("external-fallback", 1, DataBoundary.EXTERNAL_PROVIDER, "eu-central-1"),
    ),
    retry_budget=RetryBudgetPolicy(budget_percent=50, min_retry_concurrency=3),
    circuit_breaker=CircuitBreakerPolicy(
        failure_percent=50,
        minimum_throughput=10,
        sampling_duration_ms=10_000,
        break_duration_ms=300,
        half_open_probes=1,
    ),
)


def make_call(base_url: str) -> Any:
    def post(url: str) -> int:
        request = urllib.request.Request(url, data=b"{}", method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return int(response.status)
        except urllib.error.HTTPError as err:
            return err.code

    async def call(dispatch: Dispatch) -> CallResult:
        url = f"{base_url}/{dispatch.route.route_id}"
        status = await asyncio.to_thread(post, url)  # a blocking client, off the loop
        if status != 200:
            raise AttemptFailed(OutcomeKind.UNAVAILABLE, http_status=status)
        return CallResult(value="answered", http_status=200, cost_actual_micros=1_000)

    return call


async def harness(base_url: str, provider: TracerProvider) -> list[RunResult]:
    controller = AsyncRetryController(POLICY, tracer_provider=provider)  # one for all requests
    call = make_call(base_url)

    async def one(n: int) -> RunResult:
        await asyncio.sleep(n * 0.01)  # arrivals over 0.4 s
        return await controller.run(
            call,
            request={"ticket": f"INC-{n}"},  # digested, never stored
            idempotency_key=f"INC-{n}/1",
            operation="classify_incident",
            tenant="acme",
            timeout_ms=10_000,  # the absolute deadline is fixed at admission
        )

    return list(await asyncio.gather(*(one(n) for n in range(REQUESTS))))


def main(out: str) -> int:
    server = Listener(("127.0.0.1", 0), FakeProvider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(GapCountingBatchSpanProcessor(ParquetSpanExporter(out)))
    try:
        results = asyncio.run(harness(f"http://127.0.0.1:{server.server_address[1]}", provider))
    finally:
        provider.shutdown()
        server.shutdown()
    attempts = sum(len(r.receipt.attempts) for r in results)
    gates = [g for r in results for g in r.receipt.gates]
    refused = Counter(g.snapshot.guard.value for g in gates if not g.admitted)
    straight = sum(1 for r in results if r.receipt.attempts[0].route_id == "external-fallback")
    print(f"terminals: {dict(sorted(Counter(r.terminal.value for r in results).items()))}")
    print(f"attempts in receipts: {attempts}; requests the provider saw: {sum(HITS.values())}")
    print(f"refused by the shared guards: {dict(sorted(refused.items()))}")
    print(f"requests that skipped the open primary: {straight}")
    print(f"spans written under {out}; next: retryscope report {out}")
    return 0 if attempts == sum(HITS.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DATA_DIR")
    sys.exit(main(sys.argv[1]))
