"""The live instruments equal the Parquet report on the same traffic.

Each scenario of the analytics tests, and the demo's traffic, runs once through a real
TracerProvider with the stamping processor, the Parquet exporter and the metrics processor
recording into a real MeterProvider; the figures an in-memory reader collects must be the
report's, exactly.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry import trace

import retryscope
from retryscope import Attempt
from retryscope import vocabulary as v
from retryscope.analytics import connect
from retryscope.cli import build_parser
from retryscope.demo._run import generate
from tests.metrics.support import Metered, differences, live_figures, report_figures
from tests.recorder import MS, T0, Clock, Recorder
from tests.test_analytics_amplification import _nested
from tests.test_analytics_cost_effectiveness import _costs, _effectiveness_fixture
from tests.test_analytics_deadline import _fixture as _deadlines
from tests.test_analytics_fallback import _fixture as _fallbacks
from tests.test_analytics_load import _hedged, _storm
from tests.test_analytics_randomized import _generate
from tests.test_analytics_violations import _early_retry

DEMO_REQUESTS = build_parser().parse_args(["demo"]).requests
CALL_A, CALL_B, CALL_C = (f"http://127.0.0.1/v1/{name}" for name in ("embed", "chat", "rank"))


def _distinct_calls(rec: Recorder) -> None:
    """d1: one harness attempt making three distinct calls, the first and the last resent
    once; d2: a harness attempt whose call fails, then its retry making that call and
    another; d3: a call fails, then a distinct call succeeds (no retry of it)."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="d1") as req, req.attempt("primary"):
        for url, status in ((CALL_A, 503), (CALL_A, 200), (CALL_B, 200), (CALL_C, 429)):
            with rec.http_span(clock, status, url=url):
                pass
        with rec.http_span(clock, 200, url=CALL_C):
            pass
    clock = Clock(T0 + 60_000 * MS)
    with rec.request(clock, logical_request_id="d2") as req:
        with req.attempt("primary") as first:
            with rec.http_span(clock, 503, url=CALL_A):
                pass
            first.set_outcome("unavailable")
        clock.advance_ms(100)
        with req.attempt("primary"):
            for url in (CALL_A, CALL_B):
                with rec.http_span(clock, 200, url=url):
                    pass
    clock = Clock(T0 + 2 * 60_000 * MS)
    with rec.request(clock, logical_request_id="d3") as req, req.attempt("secondary"):
        for url, status in ((CALL_A, 503), (CALL_B, 200)):
            with rec.http_span(clock, status, url=url):
                pass


def _interleaved_calls(rec: Recorder) -> None:
    """i1: a call fails, a distinct call is made, then the first is resent (a resend that
    does not follow the send it repeats)."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="i1") as req, req.attempt("primary"):
        for url, status in ((CALL_A, 503), (CALL_B, 200), (CALL_A, 200)):
            with rec.http_span(clock, status, url=url):
                pass


def _rewritten(rec: Recorder) -> None:
    """Attributes written after stamping, by setters and by user code on the raw span: a
    send relabelled to another layer and route, an outcome overwritten, a cost and a
    backoff added after the attempt's outcome, a retry owner and a fallback flag set on the
    span directly. The figures are what the finished spans say."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="w1", deadline=T0 + 10_000 * MS) as req:
        with req.attempt("primary") as first:
            with rec.http_span(clock, 503) as send:
                send.set_attributes({v.ROUTE_ID.key: "edge", v.LAYER.key: "sdk"})
            first.set_outcome("unavailable")
            first.span.set_attributes({v.OUTCOME.key: "retryable", v.RETRY_OWNER.key: "sdk"})
        clock.advance_ms(100)
        with req.attempt("secondary") as second:
            second.set_outcome("rate_limited")
            second.span.set_attributes({v.FALLBACK.key: True, v.OUTCOME_KIND.key: "overloaded"})
            second.set_backoff(delay_ms=250, retry_after_ms=1_000)
            second.set_cost(reserved=900, actual=400)
        clock.advance_ms(100)
        with req.attempt("secondary") as third:
            third.set_outcome("success")
            third.span.set_attributes({v.OUTCOME.key: "non_retryable"})
            third.span.set_attributes({v.OUTCOME.key: "success", v.COST_ACTUAL.key: 70})


def _top_level_sends(rec: Recorder) -> None:
    """t1: HTTP sends made in the request's own scope, outside any attempt: a call fails, a
    distinct call is made, then the first is resent."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="t1"):
        for url, status in ((CALL_A, 503), (CALL_B, 200), (CALL_A, 200)):
            with rec.http_span(clock, status, url=url):
                pass


def _unnamed_parents(rec: Recorder) -> None:
    """Attempt spans another writer made under a harness attempt without naming it as their
    enclosing attempt (no parent layer or ordinal): they nest under their parent span's
    attempt (a failed SDK try, then its retry), so the harness attempt is no send; and one
    under a span that is no attempt stays a top-level attempt of its own."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="u1") as req:
        with req.attempt("primary") as harness:
            for ordinal, outcome in ((1, "unavailable"), (2, "success")):
                span = rec.tracer.start_span(
                    "sdk attempt",
                    kind=trace.SpanKind.CLIENT,
                    attributes={
                        v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value,
                        v.LOGICAL_REQUEST_ID.key: "u1",
                        v.LAYER.key: "sdk",
                        v.ROUTE_ID.key: "primary",
                        v.ATTEMPT_ORDINAL.key: ordinal,
                        v.OUTCOME.key: outcome,
                    },
                    start_time=clock(),
                )
                clock.advance_ms(40)
                span.end(end_time=clock())
            harness.set_outcome("success")
    clock = Clock(T0 + 60_000 * MS)
    with rec.request(clock, logical_request_id="u2"):
        with rec.tracer.start_as_current_span("queue work", start_time=clock()):
            span = rec.tracer.start_span(
                "worker attempt",
                attributes={
                    v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value,
                    v.LOGICAL_REQUEST_ID.key: "u2",
                    v.LAYER.key: "queue",
                    v.ROUTE_ID.key: "primary",
                    v.ATTEMPT_ORDINAL.key: 1,
                    v.OUTCOME.key: "success",
                },
                start_time=clock(),
            )
            clock.advance_ms(40)
            span.end(end_time=clock())


def _overlapping_retries(rec: Recorder) -> None:
    """o1: a parallel retry (no hedge) started while the first attempt still ran and ended
    before it: the retry group's order is by ordinal, so the second is a retry after the
    first's failure, whichever ended first. Each attempt runs in a context of its own, as
    on its own thread."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="o1") as req:
        first, second = req.attempt("primary"), req.attempt("secondary")
        contexts = {id(first): contextvars.copy_context(), id(second): contextvars.copy_context()}

        def run(attempt: Attempt, step: str) -> None:
            if step == "enter":
                contexts[id(attempt)].run(attempt.__enter__)
            else:
                contexts[id(attempt)].run(attempt.__exit__, None, None, None)

        run(first, "enter")
        clock.advance_ms(10)
        run(second, "enter")
        clock.advance_ms(10)
        run(second, "exit")  # succeeds first
        clock.advance_ms(10)
        first.set_outcome("unavailable")
        run(first, "exit")


def _late_children(rec: Recorder) -> None:
    """l1: an HTTP send still open when its harness attempt ended (a response read after
    the attempt returned): the harness attempt encloses it and is no send. l2: the same
    with an SDK attempt that names no enclosing attempt, started in the harness attempt's
    span."""
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="l1") as req:
        with req.attempt("primary"):
            send = rec.tracer.start_span(
                "POST",
                kind=trace.SpanKind.CLIENT,
                attributes={"http.request.method": "POST", "url.full": CALL_B},
                start_time=clock(),
            )
            clock.advance_ms(20)
        clock.advance_ms(20)
        send.set_attribute(v.HTTP_STATUS_CODE.key, 200)
        send.end(end_time=clock())
    clock = Clock(T0 + 60_000 * MS)
    with rec.request(clock, logical_request_id="l2") as req:
        with req.attempt("primary"):
            child = rec.tracer.start_span(
                "sdk attempt",
                kind=trace.SpanKind.CLIENT,
                attributes={
                    v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value,
                    v.LOGICAL_REQUEST_ID.key: "l2",
                    v.LAYER.key: "sdk",
                    v.ROUTE_ID.key: "primary",
                    v.ATTEMPT_ORDINAL.key: 1,
                    v.OUTCOME.key: "success",
                },
                start_time=clock(),
            )
            clock.advance_ms(20)
        clock.advance_ms(20)
        child.end(end_time=clock())


def _in_process_continuations(rec: Recorder, n: int = 10) -> None:
    """c*: a harness attempt hands the request to a worker in the same process
    (inject/extract) that runs inside it: the worker's queue attempt fails and is retried,
    then the harness attempt fails and is retried. w*: the worker's continuation is still
    open when the request's span ends (the request returned; the worker goes on)."""
    for i in range(n):
        clock = Clock(T0 + i * 60_000 * MS)
        with rec.request(clock, logical_request_id=f"c{i}") as req:
            with req.attempt("primary") as first:
                carrier: dict[str, str] = {}
                retryscope.inject(carrier)
                with retryscope.extract(carrier, tracer_provider=rec.provider, clock=clock) as w:
                    rec.attempt(w, "worker", layer="queue", outcome="unavailable", ms=10)
                    rec.attempt(w, "worker", layer="queue", ms=10)
                first.set_outcome("unavailable")
            rec.attempt(req, ms=10)
    for i in range(n):
        clock = Clock(T0 + (n + i) * 60_000 * MS)
        worker = contextvars.copy_context()
        req = rec.request(clock, logical_request_id=f"w{i}")
        req.__enter__()
        with req.attempt("primary"):
            carrier = {}
            retryscope.inject(carrier)
            continued = retryscope.extract(carrier, tracer_provider=rec.provider, clock=clock)
            worker.run(continued.__enter__)
            clock.advance_ms(10)
        req.__exit__(None, None, None)
        worker.run(rec.attempt, continued, "worker", layer="queue", ms=10)
        worker.run(continued.__exit__, None, None, None)


SCENARIOS: dict[str, Callable[[Recorder], object]] = {
    "in-process continuations": _in_process_continuations,
    "attempts that name no enclosing attempt": _unnamed_parents,
    "sends outside any attempt": _top_level_sends,
    "a parallel retry that ends first": _overlapping_retries,
    "attempts that end after their enclosing one": _late_children,
    "attributes written after stamping": _rewritten,
    "nested retries and HTTP sends": _nested,
    "distinct calls and their resends": _distinct_calls,
    "a call resent after another call": _interleaved_calls,
    "deadlines": _deadlines,
    "fallbacks": _fallbacks,
    "costs": _costs,
    "retry effectiveness": _effectiveness_fixture,
    "synchronized retries": _storm,
    "hedges, breakers, opaque ownership": _hedged,
    "a retry before its not_before": _early_retry,
    "randomized, seed 1": lambda rec: _generate(rec, 300, 1),
    "randomized, seed 2": lambda rec: _generate(rec, 300, 2),
}


def test_distinct_calls_are_operations_not_retries(tmp_path: Path) -> None:
    """Sends per distinct operation: 10 sends of 7 operations, 3 of them resends; a distinct
    call after a failed one is no retry."""
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _distinct_calls(recorder)
    live = live_figures(metered.points())
    assert (live["receiver_attempts"], live["operations"], live["resends"]) == (10, 7, 3)
    assert live["amplification_ratio"] == 10 / 7
    assert live["sends_per_request"] == 10 / 3
    # retries: d1's resends of the embed and rank calls and d2's second harness attempt (its
    # sends start a group of their own under it); d3's chat call follows a failure, no retry
    assert live["retries"] == 3
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_sends_outside_any_attempt_count_in_their_operations(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _top_level_sends(recorder)
    live = live_figures(metered.points())
    assert (live["receiver_attempts"], live["operations"], live["resends"]) == (3, 2, 1)
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_a_resend_after_another_call_is_a_resend(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _interleaved_calls(recorder)
    live = live_figures(metered.points())
    assert (live["receiver_attempts"], live["operations"], live["resends"]) == (3, 2, 1)
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_a_retry_is_decided_in_the_model_order_not_the_end_order(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _overlapping_retries(recorder)
    live = live_figures(metered.points())
    assert (live["physical_attempts"], live["retries"], live["retry_successes"]) == (2, 1, 1)
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_an_attempt_whose_child_ends_after_it_is_no_send(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _late_children(recorder)
    live = live_figures(metered.points())
    assert live["receiver_by_layer"] == {"transport": 1, "sdk": 1}
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_an_in_process_continuation_counts_in_its_request(tmp_path: Path) -> None:
    """A worker continuing the request in the same process adds its attempts to the
    request's, whichever span ended first: 3 sends per c-request (the worker's two queue
    attempts sit beneath the harness attempt the carrier was injected in, and the second
    harness attempt), 1 per w-request (its queue attempt, beneath its harness attempt)."""
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _in_process_continuations(recorder, 10)
    live = live_figures(metered.points())
    assert (live["logical_requests"], live["histogram_requests"]) == (20, 20)
    assert live["histogram_attempts"] == 10 * 3 + 10 * 1
    assert metered.processor is not None
    assert metered.processor.open_requests() == 0
    assert list(differences(live, report_figures(recorder.connect()))) == []


@pytest.mark.parametrize("handed", [False, True], ids=["second processor", "handed spans"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_live_figures_equal_the_report(tmp_path: Path, scenario: str, handed: bool) -> None:
    """Either wiring: the metrics processor added to the provider, or handed the ended
    spans by the stamping processor (``AttemptStampingProcessor(metrics=...)``)."""
    if handed:
        metered = Metered.unwired()
        recorder = Recorder(tmp_path / "data", metrics=metered.processor)
    else:
        recorder = Recorder(tmp_path / "data")
        metered = Metered.on(recorder.provider)
    SCENARIOS[scenario](recorder)
    live = live_figures(metered.points())
    report = report_figures(recorder.connect())
    assert list(differences(live, report)) == []
    assert metered.processor.errors == 0
    assert metered.processor.open_requests() == 0
    assert live["logical_requests"] > 0


def test_attributes_written_after_stamping_are_the_ones_counted(tmp_path: Path) -> None:
    """What the finished spans hold is counted, not what was stamped: the relabelled send
    on its new layer and route, the overwritten outcomes, the cost written last."""
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    _rewritten(recorder)
    live = live_figures(metered.points())
    assert live["receiver_by_layer"] == {"sdk": 1, "harness": 2}
    assert live["requests_with_fallback"] == 1
    assert live["backoff_delay"] == (1, 250)
    assert list(differences(live, report_figures(recorder.connect()))) == []


def test_live_figures_equal_the_report_on_the_demo_traffic(tmp_path: Path) -> None:
    """``retryscope demo``'s traffic (its default 300 requests over the five scenarios)."""
    out = tmp_path / "demo"
    metered = Metered.on_meter_provider()
    generate(out, DEMO_REQUESTS, seed=7, progress=False, meter_provider=metered.meter_provider)
    con, _ = connect(out)
    live = live_figures(metered.points())
    report = report_figures(con)
    assert list(differences(live, report)) == []
    # the demo shows every kind of figure
    for name in (
        "resends",
        "nested_retry_requests",
        "requests_with_fallback",
        "boundary_widened_requests",
        "deadline_exhausted",
        "late_successes",
        "doomed_dispatches",
        "backoff_delay",
    ):
        assert live[name], name
