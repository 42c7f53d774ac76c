"""RetryController against real spans and a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from retryscope import vocabulary as v
from retryscope.control._calls import AttemptFailed, CallResult, Dispatch
from retryscope.control._controller import RetryController
from retryscope.control._lab import (
    DEADLINE_MS,
    IDEMPOTENCY_KEY,
    OPERATION,
    REQUEST_PAYLOAD,
    TENANT,
    reference_admission,
    reference_attempts,
    reference_policy,
)
from retryscope.control._policy import EvidenceExpired
from retryscope.control._receipts import policy_sha256, receipt_json
from retryscope.vocabulary import OutcomeKind, Terminal

RUN = {
    "request": REQUEST_PAYLOAD,
    "idempotency_key": IDEMPOTENCY_KEY,
    "operation": OPERATION,
    "tenant": TENANT,
    "deadline_ms": DEADLINE_MS,
}


def _controller(clock: Any, spans: Any, **kw: Any) -> RetryController:
    policy = kw.pop("policy", reference_policy())
    return RetryController(
        policy, clock=clock, sleep=clock.sleep, tracer_provider=spans.provider, **kw
    )


def test_controller_reproduces_the_reference_receipt_exactly(spans: Any, clock: Any) -> None:
    script = [
        (
            100,
            CallResult(
                kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250, cost_actual_micros=150_000
            ),
        ),
        (100, CallResult(kind=OutcomeKind.UNAVAILABLE)),
        (250, CallResult(value="answer", cost_actual_micros=250_000)),
    ]
    calls: list[Dispatch] = []

    def call(d: Dispatch) -> CallResult:
        calls.append(d)
        duration, result = script[len(calls) - 1]
        clock.advance_ms(duration)
        return result

    result = _controller(clock, spans).run(call, **RUN)
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "answer")
    assert result.receipt.attempts == reference_attempts()
    assert clock.slept_ms == [250, 200]
    assert [d.route.route_id for d in calls] == [
        "private-primary",
        "private-primary",
        "external-fallback",
    ]
    assert [d.deadline_remaining_ms for d in calls] == [4_000, 3_650, 3_350]

    from retryscope.control._lab import build_report

    assert json.loads(result.receipt_json) == build_report()["receipt"]  # byte-equal receipt
    assert result.receipt_json == receipt_json(result.receipt)

    finished = spans.exporter.get_finished_spans()
    request = next(s for s in finished if s.attributes[v.SPAN_ROLE.key] == "logical_request")
    attempts = [s for s in finished if s.attributes[v.SPAN_ROLE.key] == "attempt"]
    assert request.attributes[v.TERMINAL.key] == "complete"
    assert request.attributes[v.POLICY_DIGEST.key] == policy_sha256(reference_policy())
    assert request.attributes[v.DEADLINE.key] == 5_000 * 1_000_000
    expected = [
        # route, ordinal, route ordinal, delay, hint, not_before ms, remaining,
        # outcome, kind, decision, reserved, actual
        (
            "private-primary",
            1,
            1,
            None,
            None,
            None,
            4_000,
            "retryable",
            "rate_limited",
            "retry",
            200_000,
            150_000,
        ),
        (
            "private-primary",
            2,
            2,
            250,
            250,
            1_350,
            3_650,
            "retryable",
            "unavailable",
            "fallback",
            200_000,
            None,
        ),
        (
            "external-fallback",
            3,
            1,
            200,
            None,
            1_650,
            3_350,
            "success",
            None,
            "complete",
            300_000,
            250_000,
        ),
    ]
    policy = reference_policy()
    for span, row in zip(attempts, expected, strict=True):
        a = span.attributes
        nb = a.get(v.NOT_BEFORE.key)
        got = (
            a[v.ROUTE_ID.key],
            a[v.ATTEMPT_ORDINAL.key],
            a[v.ROUTE_ATTEMPT_ORDINAL.key],
            a.get(v.BACKOFF_DELAY_MS.key),
            a.get(v.RETRY_AFTER_MS.key),
            None if nb is None else nb // 1_000_000,
            a[v.DEADLINE_REMAINING_MS.key],
            a[v.OUTCOME.key],
            a.get(v.OUTCOME_KIND.key),
            a[v.DECISION.key],
            a[v.COST_RESERVED.key],
            a.get(v.COST_ACTUAL.key),
        )
        assert got == row
        route = next(r for r in policy.routes if r.route_id == row[0])
        assert a[v.ROUTE_RELEASE.key] == route.route_release_sha256
        assert a[v.ROUTE_PRIORITY.key] == route.priority
        assert a[v.COST_ESTIMATED.key] is (row[11] is None)
        assert a[v.POLICY_DIGEST.key] == policy_sha256(policy)
        assert a[v.IDEMPOTENCY_DIGEST.key] == reference_admission().idempotency_key_sha256
        assert a[v.LOGICAL_REQUEST_DIGEST.key] == reference_admission().logical_request_sha256


def test_controller_over_http_honours_retry_after_and_falls_back(
    spans: Any, receiver: Any, clock: Any, submit: Any
) -> None:
    receiver.script = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "soon"})]
    result = _controller(clock, spans).run(submit(receiver.url, clock), **RUN)
    assert result.terminal is Terminal.COMPLETE
    assert result.value == {"result": "ok"}
    assert receiver.submits[IDEMPOTENCY_KEY] == 3  # one receiver request per physical attempt
    assert clock.slept_ms == [1_000, 200]  # 1 s hint beats the 200 ms backoff; invalid hint ignored
    statuses = [
        s.attributes.get(v.HTTP_STATUS_CODE.key)
        for s in spans.exporter.get_finished_spans()
        if s.attributes[v.SPAN_ROLE.key] == "attempt"
    ]
    assert statuses == [429, 503, 200]


def test_non_retryable_and_indeterminate_stop_without_route_shopping(
    spans: Any, clock: Any
) -> None:
    for failure, terminal in [
        (AttemptFailed(OutcomeKind.POLICY_DENIED, http_status=403), Terminal.STOP_NON_RETRYABLE),
        (TimeoutError("read timed out"), Terminal.STOP_INDETERMINATE),
    ]:
        clock = type(clock)(1_000)
        calls: list[str] = []

        def call(d: Dispatch, failure: Exception = failure, calls: list[str] = calls) -> Any:
            calls.append(d.route.route_id)
            raise failure

        result = _controller(clock, spans).run(call, **RUN)
        assert result.terminal is terminal
        assert calls == ["private-primary"]
        assert result.value is None


def test_connection_refused_is_retried_until_the_deadline_stops_it(spans: Any, clock: Any) -> None:
    calls: list[int] = []

    def call(d: Dispatch) -> Any:
        calls.append(d.attempt_ordinal)
        clock.advance_ms(100)
        raise ConnectionRefusedError

    result = _controller(clock, spans).run(call, **{**RUN, "deadline_ms": 1_600})
    assert result.terminal is Terminal.STOP_DEADLINE
    assert calls == [1, 2]  # the fallback could not start before 1,600 ms = the deadline
    assert result.receipt.decisions[-1].decision.value == "stop"


def test_admission_binds_the_request_and_checks_the_evidence_before_any_dispatch(
    spans: Any, clock: Any
) -> None:
    controller = _controller(clock, spans)

    def never(d: Dispatch) -> Any:
        raise AssertionError("dispatched")

    evidence = reference_policy().routes[0].behavior_evidence.expires_at_ms
    with pytest.raises(EvidenceExpired) as err:
        controller.run(never, **{**RUN, "deadline_ms": evidence + 1})
    assert err.value.field == "routes[0].behavior_evidence.expires_at_ms"
    with pytest.raises(ValueError, match="exactly one"):
        controller.run(never, **{**RUN, "timeout_ms": 1_000})
    assert spans.exporter.get_finished_spans() == ()
    bound = controller.admit(
        request=REQUEST_PAYLOAD, idempotency_key=IDEMPOTENCY_KEY, operation=OPERATION,
        tenant=TENANT, timeout_ms=4_000,
    )  # fmt: skip
    assert bound == reference_admission()  # the clock stands at 1,000 ms


def test_real_sleep_and_clock(spans: Any) -> None:
    now_ms = time.time_ns() // 1_000_000
    policy = replace(reference_policy(), base_backoff_ms=30)
    outcomes = [CallResult(kind=OutcomeKind.UNAVAILABLE), CallResult(value=1)]
    started = time.monotonic()
    result = RetryController(policy, tracer_provider=spans.provider).run(
        lambda d: outcomes[d.attempt_ordinal - 1], **{**RUN, "deadline_ms": now_ms + 30_000}
    )
    assert result.terminal is Terminal.COMPLETE
    assert time.monotonic() - started >= 0.03
    second = result.receipt.attempts[1]
    assert second.not_before_ms is not None
    assert second.start_ms >= second.not_before_ms


AUDIT_COLUMNS = """
    route_id, route_release, route_attempt_ordinal, attempt_ordinal, logical_request_digest,
    idempotency_digest, epoch_ns(start_time) AS start_time, epoch_ns(end_time) AS end_time,
    epoch_ns(not_before) AS not_before, backoff_delay_ms, retry_after_ms,
    cost_reserved_micros, cost_actual_micros, outcome, outcome_kind
"""


def test_controller_telemetry_audits_back_to_the_same_receipt(tmp_path: Any, clock: Any) -> None:
    """Spans → real Parquet → DuckDB ``attempts`` view → evaluator: the same receipt."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from retryscope.analytics import connect
    from retryscope.control._capability import capability_sha256
    from retryscope.control._evaluator import attempts_from_rows, evaluate
    from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(tmp_path / "spans")))
    script = iter(
        [
            (
                100,
                CallResult(
                    kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250, cost_actual_micros=150_000
                ),
            ),
            (100, CallResult(kind=OutcomeKind.UNAVAILABLE)),
            (250, CallResult(value="answer", cost_actual_micros=250_000)),
        ]
    )

    def call(d: Dispatch) -> CallResult:
        duration, result = next(script)
        clock.advance_ms(duration)
        return result

    policy = reference_policy()
    controller = RetryController(policy, clock=clock, sleep=clock.sleep, tracer_provider=provider)
    result = controller.run(call, **RUN)
    provider.shutdown()

    con, _ = connect(tmp_path / "spans")
    cursor = con.execute(
        f"SELECT {AUDIT_COLUMNS} FROM attempts WHERE logical_request_id = ?",
        [result.logical_request_id],
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    audited = evaluate(policy, reference_admission(), attempts_from_rows(rows))
    assert receipt_json(audited) == result.receipt_json
    (digest,) = con.execute("SELECT DISTINCT policy_digest FROM logical_requests").fetchone()
    assert digest == policy_sha256(policy)
    # the controller stamps what the analytics need to judge fallback quality
    from retryscope.analytics import fallback

    (req_row,) = con.execute(
        "SELECT required_capability_digest, required_behavior_class, max_data_boundary"
        " FROM logical_requests"
    ).fetchall()
    assert req_row == (
        capability_sha256(policy.capability),
        policy.behavior_class_sha256,
        policy.max_data_boundary.value,
    )
    routes = con.execute(
        "SELECT DISTINCT route_id, route_capability_digest, route_data_boundary FROM attempts"
        " ORDER BY route_id"
    ).fetchall()
    assert routes == sorted(  # each route was proven to satisfy the request's contract
        (r.route_id, capability_sha256(policy.capability), r.data_boundary.value)
        for r in policy.routes
    )
    (overall,) = fallback(con).to_pylist()
    assert overall["fallback_successes"] == 1
    assert overall["fallback_quality"] == 1.0


def test_stream_interrupted_after_output_stops_for_reconciliation(spans: Any, clock: Any) -> None:
    """Output reached the caller, then the connection broke: no retry, no fallback splice."""
    from retryscope.instrumentation._streaming import stream

    delivered: list[str] = []
    routes: list[str] = []

    def chunks() -> Any:
        yield "The incident is "
        yield "severity 2 because"
        raise ConnectionRefusedError("peer went away mid-stream")  # retryable if guessed

    def call(d: Dispatch) -> Any:
        routes.append(d.route.route_id)
        for chunk in stream(d.attempt, chunks()):
            delivered.append(chunk)
        return "".join(delivered)

    result = _controller(clock, spans).run(call, **RUN)
    assert result.terminal is Terminal.STOP_INDETERMINATE
    assert routes == ["private-primary"]  # nothing appended from the fallback
    assert delivered == ["The incident is ", "severity 2 because"]
    (attempt,) = [
        s for s in spans.exporter.get_finished_spans() if s.attributes[v.SPAN_ROLE.key] == "attempt"
    ]
    assert attempt.attributes[v.OUTCOME_KIND.key] == "stream_interrupted_after_output"
    assert attempt.attributes[v.STREAM_EVENTS.key] == 2


def test_class_names_are_recorded_beside_their_digests(spans: Any, clock: Any) -> None:
    """The names given by digest land beside the digests; a digest with none gets none, and
    the policy's digest does not change with them."""
    policy = reference_policy()
    names = {policy.behavior_class_sha256: "incident-severity-contract/v1"}
    controller = _controller(clock, spans, class_names=names)
    assert controller.policy_sha256 == policy_sha256(policy)
    result = controller.run(lambda d: CallResult(value="answer"), **RUN)
    assert result.terminal is Terminal.COMPLETE
    finished = spans.exporter.get_finished_spans()
    request = next(s for s in finished if s.attributes[v.SPAN_ROLE.key] == "logical_request")
    attempt = next(s for s in finished if s.attributes[v.SPAN_ROLE.key] == "attempt")
    assert request.attributes[v.REQUIRED_BEHAVIOR_CLASS_NAME.key] == (
        "incident-severity-contract/v1"
    )
    assert attempt.attributes[v.ROUTE_BEHAVIOR_CLASS_NAME.key] == "incident-severity-contract/v1"
    assert v.REQUIRED_CAPABILITY_NAME.key not in request.attributes  # no name given for it
    assert v.ROUTE_CAPABILITY_NAME.key not in attempt.attributes
