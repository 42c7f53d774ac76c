"""The context API and the stamping processor, through a real TracerProvider to Parquet."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context

import pytest
from opentelemetry import trace

from retryscope import logical_request
from retryscope.instrumentation._digests import idempotency_digest, request_digest
from retryscope.vocabulary import Outcome, SpanRole
from tests.containment import contains

from .conftest import Pipeline


def _rows(pipeline: Pipeline, sql: str) -> list[tuple[object, ...]]:
    return pipeline.connect().execute(sql).fetchall()


def test_three_attempts_two_rate_limited_then_success(pipeline: Pipeline, clock) -> None:
    deadline = clock.now + 10_000 * 1_000_000
    with logical_request(
        operation="chat",
        tenant="acme",
        idempotency_key="k-1",
        request={"q": "hello"},
        deadline=deadline,
        tracer_provider=pipeline.provider,
        clock=clock,
    ) as req:
        for ordinal, delay in enumerate((0, 200, 400), start=1):
            clock.advance_ms(delay)
            with req.attempt("primary", route_release="m@2026-10") as a:
                a.set_backoff(delay_ms=delay, retry_after_ms=150, not_before=clock.now)
                a.set_cost(reserved=1_000, actual=0 if ordinal < 3 else 900)
                clock.advance_ms(50)
                if ordinal < 3:
                    a.set_outcome("retryable", "rate_limited", http_status=429)
                else:
                    a.set_outcome("success")
    con = pipeline.connect()
    rows = con.execute(
        "SELECT attempt_ordinal, route_attempt_ordinal, outcome, outcome_kind, backoff_delay_ms,"
        " retry_after_ms, deadline_remaining_ms, cost_actual_micros, http_status_code,"
        " epoch_ns(not_before) = epoch_ns(start_time), is_fallback, layer"
        " FROM attempts ORDER BY attempt_ordinal"
    ).fetchall()
    assert rows == [
        (1, 1, "retryable", "rate_limited", 0, 150, 10_000, 0, 429, True, False, "harness"),
        (2, 2, "retryable", "rate_limited", 200, 150, 9_750, 0, 429, True, False, "harness"),
        (3, 3, "success", None, 400, 150, 9_300, 900, None, True, False, "harness"),
    ]
    from retryscope.analytics import build_report

    report = build_report(con)
    assert report["logical_requests"] == 1
    assert report["physical_attempts"] == 3
    assert report["amplification_ratio"] == 3.0
    assert report["terminals"] == {"complete": 1}
    (lr,) = con.execute(
        "SELECT terminal, idempotency_digest, logical_request_digest, tenant FROM logical_requests"
    ).fetchall()
    assert lr == (
        "complete",
        idempotency_digest("acme", "chat", "k-1"),
        request_digest({"q": "hello"}),
        "acme",
    )


def test_third_party_spans_are_stamped_and_outside_spans_left_alone(pipeline: Pipeline) -> None:
    tracer = pipeline.provider.get_tracer("third.party")
    with tracer.start_as_current_span("before"):
        pass
    with logical_request(operation="embed", tracer_provider=pipeline.provider) as req:
        with tracer.start_as_current_span("inside-request-only"):
            pass
        with req.attempt("r1"), tracer.start_as_current_span("sdk-call"):
            with tracer.start_as_current_span("http-send"):
                pass
    with tracer.start_as_current_span("after"):
        pass
    rows = dict(
        (name, (lrid, ordinal, route, role))
        for name, lrid, ordinal, route, role in _rows(
            pipeline,
            "SELECT name, logical_request_id, attempt_ordinal, route_id, span_role FROM spans",
        )
    )
    assert rows["before"] == (None, None, None, None)
    assert rows["after"] == (None, None, None, None)
    assert rows["inside-request-only"] == (req.id, None, None, None)
    assert rows["sdk-call"] == (req.id, 1, "r1", None)
    assert rows["http-send"] == (req.id, 1, "r1", None)
    assert rows["attempt r1"][3] == SpanRole.ATTEMPT.value


def test_threads_and_asyncio_tasks_keep_their_own_request(pipeline: Pipeline) -> None:
    tracer = pipeline.provider.get_tracer("worker")
    ids: dict[str, str] = {}

    def work(name: str) -> None:
        with logical_request(operation=name, tracer_provider=pipeline.provider) as req:
            ids[name] = req.id
            with req.attempt("r") as _a:
                inner = copy_context()
                t = threading.Thread(
                    target=inner.run, args=(lambda: tracer.start_span(f"child-{name}").end(),)
                )
                t.start()
                t.join()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, [f"t{i}" for i in range(8)]))

    async def one(name: str) -> None:
        with logical_request(operation=name, tracer_provider=pipeline.provider) as req:
            ids[name] = req.id
            with req.attempt("r"):
                await asyncio.sleep(0.001)
                await asyncio.create_task(_child(name))

    async def _child(name: str) -> None:
        await asyncio.sleep(0)
        tracer.start_span(f"child-{name}").end()

    async def main() -> None:
        await asyncio.gather(*(one(f"a{i}") for i in range(8)))

    asyncio.run(main())
    rows = _rows(
        pipeline,
        "SELECT name, logical_request_id, attempt_ordinal FROM spans WHERE name LIKE 'child-%'",
    )
    assert len(rows) == 16
    for name, lrid, ordinal in rows:
        assert lrid == ids[name.removeprefix("child-")]
        assert ordinal == 1


def test_exception_is_recorded_classified_and_terminal_derived(pipeline: Pipeline, clock) -> None:
    with (
        pytest.raises(ConnectionRefusedError),
        logical_request(operation="chat", tracer_provider=pipeline.provider, clock=clock),
    ):
        raise ConnectionRefusedError("refused before any attempt")
    with logical_request(operation="chat", tracer_provider=pipeline.provider, clock=clock) as req:
        with pytest.raises(TimeoutError), req.attempt("primary"):
            raise TimeoutError("read timed out")
    rows = _rows(
        pipeline,
        "SELECT outcome, outcome_kind, error_type, status_code, len(events) FROM attempts",
    )
    assert rows == [
        ("indeterminate", "unknown_provider_acceptance", "TimeoutError", "ERROR", 1),
    ]
    terminals = {t for (t,) in _rows(pipeline, "SELECT terminal FROM logical_requests")}
    assert terminals == {"stop_attempt_budget", "stop_indeterminate"}


def test_late_success_loses_to_the_deadline(pipeline: Pipeline, clock) -> None:
    deadline = clock.now + 100 * 1_000_000
    with logical_request(
        operation="chat", deadline=deadline, tracer_provider=pipeline.provider, clock=clock
    ) as req:
        with req.attempt("primary") as a:
            clock.advance_ms(150)
            a.set_outcome("success")
    ((terminal, remaining),) = _rows(
        pipeline,
        "SELECT l.terminal, a.deadline_remaining_ms FROM logical_requests l, attempts a",
    )
    assert (terminal, remaining) == ("stop_deadline", 100)


def test_outcome_validation_names_the_problem_and_raises_nothing(pipeline: Pipeline) -> None:
    with logical_request(operation="x", tracer_provider=pipeline.provider) as req:
        with req.attempt("r") as a:
            with contains("Attempt.set_outcome", "needs a failure kind"):
                a.set_outcome("retryable")
            with contains("Attempt.set_outcome", "is non_retryable, not retryable"):
                a.set_outcome("retryable", "rejected")
            with contains("Attempt.set_backoff", "not_before"):
                a.set_backoff(not_before=-5)
            a.set_outcome("invalid_output")
            assert a.outcome is Outcome.NON_RETRYABLE


def test_context_never_uses_baggage(pipeline: Pipeline) -> None:
    from opentelemetry import baggage

    with (
        logical_request(
            operation="chat", idempotency_key="secret", tracer_provider=pipeline.provider
        ) as req,
        req.attempt("r"),
    ):
        assert dict(baggage.get_all()) == {}
        assert trace.get_current_span().is_recording()
