"""Small hand-built traffic for the drift and what-if tests, made by the real instrumentation.

Requests run under the real ``RetryController`` (virtual clock, the lab's reference policy;
the controller records the policy document on each request span) or under a hand-written
harness loop that stamps the same policy digest but does not follow the policy (the drift
cases; it writes the policy as a side file next to the data unless told not to). Spans go
through the real stamping processor and Parquet exporter into ``<dir>/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from retryscope.analytics.replay._policy_drift import write_policy_side_file
from retryscope.control._calls import CallResult, Dispatch
from retryscope.control._controller import RetryController
from retryscope.control._lab import (
    DEADLINE_MS,
    IDEMPOTENCY_KEY,
    OPERATION,
    PRIMARY,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)
from retryscope.control._policy import RetryPolicy
from retryscope.control._receipts import policy_sha256
from retryscope.instrumentation import (
    AttemptStampingProcessor,
    ParquetSpanExporter,
    logical_request,
)
from retryscope.vocabulary import Decision, OutcomeKind, Terminal

__all__ = ["MS", "RUN", "Clock", "Traffic", "policy_with"]

MS = 1_000_000
RUN = {
    "request": REQUEST_PAYLOAD,
    "idempotency_key": IDEMPOTENCY_KEY,
    "operation": OPERATION,
    "tenant": TENANT,
}


class Clock:
    """Virtual unix-ns clock; the controller's sleep advances it."""

    def __init__(self, start_ms: int) -> None:
        self.now = start_ms * MS

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * MS

    def sleep(self, seconds: float) -> None:
        self.advance_ms(round(seconds * 1000))


class Traffic:
    """A provider writing real Parquet into ``directory`` (closed by :meth:`close`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.provider = TracerProvider()
        self.provider.add_span_processor(AttemptStampingProcessor())
        self.provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(directory)))

    def controlled(
        self,
        script: list[tuple[int, CallResult]],
        *,
        policy: RetryPolicy | None = None,
        start_ms: int = 1_000,
        request_id: str,
    ) -> Terminal:
        """Run the real controller; each call takes (duration ms, result) from ``script``."""
        policy = policy or reference_policy()
        clock = Clock(start_ms)
        steps: Iterator[tuple[int, CallResult]] = iter(script)

        def call(d: Dispatch) -> CallResult:
            duration, result = next(steps)
            clock.advance_ms(duration)
            return result

        controller = RetryController(
            policy, clock=clock, sleep=clock.sleep, tracer_provider=self.provider
        )
        return controller.run(
            call, logical_request_id=request_id, deadline_ms=DEADLINE_MS, **RUN
        ).terminal

    def by_hand(
        self,
        *,
        request_id: str,
        steps: list[tuple[str, int, OutcomeKind | None]],
        side_file: bool = True,
    ) -> None:
        """A harness loop that stamps the reference policy's digest but makes its own
        decisions: each step is (route, backoff ms before it, failure kind or None for a
        success), every attempt taking 100 ms and reserving the primary's worst case."""
        policy = reference_policy()
        if side_file:
            write_policy_side_file(self.directory, policy)
        clock = Clock(1_000)
        with logical_request(
            tracer_provider=self.provider,
            clock=clock,
            deadline=DEADLINE_MS * MS,
            retry_owner="harness",
            policy_digest=policy_sha256(policy),
            logical_request_id=request_id,
            **RUN,
        ) as req:
            for i, (route, backoff_ms, kind) in enumerate(steps):
                clock.advance_ms(backoff_ms)
                release = next(r for r in policy.routes if r.route_id == PRIMARY.route_id)
                with req.attempt(route, route_release=release.route_release_sha256) as a:
                    if i:
                        a.set_backoff(delay_ms=backoff_ms, not_before=clock.now)
                    a.set_cost(reserved=PRIMARY.max_attempt_cost_micros)
                    clock.advance_ms(100)
                    if kind is None:
                        a.set_outcome("success", http_status=200)
                        a.set_decision(Decision.COMPLETE)
                    else:
                        a.set_outcome(kind)
                        a.set_decision(Decision.RETRY)

    def close(self) -> None:
        self.provider.shutdown()


def policy_with(**changes: object) -> RetryPolicy:
    return replace(reference_policy(), **changes)  # type: ignore[arg-type]
