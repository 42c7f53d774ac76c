"""retryscope controller example: one retry owner, a validated policy with a fallback route,
a durable journal.

    python examples/controller.py DATA_DIR
    retryscope report DATA_DIR            # needs: pip install 'retryscope[analytics]'

The policy allows two tries on a private primary and one on an external fallback; both
satisfy the request's capability contract field by field (modalities, context and output
bounds, strict JSON schema, region, retention) and bind the same behavior class with
evaluation evidence that is still valid. The policy is reusable: each run binds its own
request, idempotency key and deadline. The simulated receiver rate-limits the
first try (Retry-After 250 ms) and is unavailable on the second, so the controller waits out
the hint, retries, then falls back; every decision is the policy's and is checked by the
pure evaluator. Time is virtual (the controller's clock and sleep), so nothing waits.

The journal (``DATA_DIR/_journal/retry.sqlite``; ``_`` folders are not part of the data set)
records each dispatch before it crosses the effect boundary. Running the same request again
(here: the same worker, restarted) recovers its terminal from the journal and dispatches
nothing.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from retryscope import AttemptStampingProcessor, OutcomeKind, ParquetSpanExporter
from retryscope.control import (
    AttemptFailed,
    BehaviorEvidence,
    CallResult,
    CapabilityContract,
    Dispatch,
    FallbackRoute,
    Journal,
    Modality,
    OutputMode,
    RetryController,
    RetryPolicy,
    replay,
)
from retryscope.instrumentation import GapCountingBatchSpanProcessor
from retryscope.vocabulary import DataBoundary, RetryOwner

TENANT, OPERATION, KEY = "acme", "classify_incident", "INC-4711/1"
PAYLOAD = {"operation": OPERATION, "ticket": "INC-4711"}


def label(text: str) -> str:
    """A SHA-256 naming a release, contract or behavior class (any stable 64-hex digest)."""
    return hashlib.sha256(text.encode()).hexdigest()


NEEDED = CapabilityContract(
    input_modalities=frozenset({Modality.TEXT}),
    output_modalities=frozenset({Modality.TEXT}),
    context_tokens=8_000,
    output_tokens=1_000,
    output_mode=OutputMode.JSON_SCHEMA,  # schema-constrained decoding
    output_schema_sha256=label("schema:incident-severity/v1"),
    tools=frozenset(),
    stream_terminal_event=False,
    stream_usage_event=False,
    regions=frozenset({"eu-west-1", "eu-central-1"}),  # where the data may be processed
    retention_days=30,  # the most a provider may keep it
)
BEHAVIOR = label("behavior:incident-severity-contract/v1")
YEAR_MS = 365 * 24 * 3600 * 1000


def route(
    route_id: str, priority: int, boundary: DataBoundary, tries: int, region: str, now_ms: int
) -> FallbackRoute:
    return FallbackRoute(
        route_id=route_id,
        route_release_sha256=label(f"release:{route_id}/2026-10-01"),
        capability=CapabilityContract(
            input_modalities=frozenset({Modality.TEXT, Modality.IMAGE}),
            output_modalities=frozenset({Modality.TEXT}),
            context_tokens=128_000,
            output_tokens=4_096,
            output_mode=OutputMode.JSON_SCHEMA,
            output_schema_sha256=NEEDED.output_schema_sha256,  # validated for this schema
            tools=frozenset(),
            stream_terminal_event=True,
            stream_usage_event=True,
            regions=frozenset({region}),
            retention_days=0,
        ),
        behavior_class_sha256=BEHAVIOR,
        # the evaluation that admitted this release for the behavior class, and its expiry
        behavior_evidence=BehaviorEvidence(label(f"eval:{route_id}"), now_ms + YEAR_MS),
        data_boundary=boundary,
        priority=priority,  # 0 is the primary; attempts on priority > 0 are fallbacks
        max_attempts=tries,
        supports_idempotency=True,
        max_attempt_cost_micros=200_000,  # reserved before each dispatch
    )


def policy(now_ms: int) -> RetryPolicy:
    return RetryPolicy(
        retry_owner=RetryOwner.HARNESS,
        capability=NEEDED,
        behavior_class_sha256=BEHAVIOR,
        max_data_boundary=DataBoundary.EXTERNAL_PROVIDER,  # the fallback may leave the VPC
        base_backoff_ms=200,
        max_backoff_ms=1_500,
        max_retry_after_ms=2_000,
        max_total_attempts=4,
        max_total_cost_micros=1_000_000,
        routes=(
            route("private-primary", 0, DataBoundary.PRIVATE_SERVICE, 2, "eu-west-1", now_ms),
            route(
                "external-fallback", 1, DataBoundary.EXTERNAL_PROVIDER, 1, "eu-central-1", now_ms
            ),
        ),
    )


class VirtualClock:
    """Unix ns that only ``sleep`` and the receiver's service time move."""

    def __init__(self) -> None:
        self.now = time.time_ns()

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


class Receiver:
    """The provider side: counts what reaches it, per route."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.calls: dict[str, int] = {}

    def __call__(self, dispatch: Dispatch) -> CallResult:
        route_id = dispatch.route.route_id
        self.calls[route_id] = self.calls.get(route_id, 0) + 1
        self.clock.sleep(0.1)  # service time
        if route_id == "private-primary" and self.calls[route_id] == 1:
            raise AttemptFailed(OutcomeKind.RATE_LIMITED, retry_after_ms=250, http_status=429)
        if route_id == "private-primary":
            raise AttemptFailed(OutcomeKind.UNAVAILABLE, http_status=503)
        return CallResult(value={"severity": "high"}, cost_actual_micros=150_000)


def main(out: str) -> int:
    clock = VirtualClock()
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(GapCountingBatchSpanProcessor(ParquetSpanExporter(out)))
    journal_path = Path(out) / "_journal" / "retry.sqlite"
    journal_path.parent.mkdir(parents=True, exist_ok=True)
    receiver = Receiver(clock)
    now_ms = clock() // 1_000_000
    the_policy = policy(now_ms)
    runs = []
    for _ in range(2):  # the second run finds the terminal in the journal
        journal = Journal(journal_path)
        try:
            controller = RetryController(
                the_policy,
                journal,
                clock=clock,
                sleep=clock.sleep,
                tracer_provider=provider,
                holder="worker-1",  # the lease holder: a restarted worker keeps its name
            )
            runs.append(
                controller.run(
                    receiver, request=PAYLOAD, idempotency_key=KEY, operation=OPERATION,
                    tenant=TENANT, deadline_ms=now_ms + 30_000,  # absolute, never reset
                )
            )  # fmt: skip
        finally:
            journal.close()
    provider.shutdown()
    first, second = runs
    print(f"first run: {first.terminal.value}, answer {first.value}")
    print(f"receiver saw: {receiver.calls}")
    print(f"receipt replays without drift: {replay(first.receipt_json).ok}")
    print(f"second run: {second.terminal.value} (recovered from the journal, no dispatch)")
    print(f"spans written under {out}; next: retryscope report {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DATA_DIR")
    sys.exit(main(sys.argv[1]))
