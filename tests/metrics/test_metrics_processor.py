"""The metrics processor at its boundaries: bounded values, optional dimensions, exemplars,
the switch, contained failures, requests it cannot finish, continuations, threads, and
its settings. Real TracerProvider and MeterProvider throughout."""

from __future__ import annotations

import statistics
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

import retryscope
from retryscope import vocabulary as v
from retryscope.instrumentation import (
    AttemptMetricsProcessor,
    AttemptStampingProcessor,
    MetricsConfig,
    logical_request,
)
from retryscope.instrumentation._configurator import with_retryscope_processors
from retryscope.instrumentation.metrics import OVERFLOW, Dimension
from retryscope.instrumentation.metrics import _instruments as i
from retryscope.instrumentation.metrics._latency import RollingMedian
from retryscope.instrumentation.metrics._limits import MAX_VALUE_LENGTH, Capped, Enumerated
from retryscope.instrumentation.metrics._tally import RequestTally
from tests.metrics.support import Metered, live_figures
from tests.recorder import T0, Clock


def _provider(config: MetricsConfig | None = None) -> tuple[TracerProvider, Metered]:
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    return provider, Metered.on(provider, config)


def _one(provider: TracerProvider, route: str = "primary", **request: object) -> None:
    with (
        logical_request(operation="chat", tracer_provider=provider, **request) as req,  # type: ignore[arg-type]
        req.attempt(route) as attempt,
    ):
        attempt.set_outcome("success")


def _series(metered: Metered, inst: i.Instrument) -> list[dict[str, object]]:
    return [dict(p.attributes or {}) for p in metered.points().get(inst.name, [])]


def test_routes_past_the_cap_and_long_or_foreign_values_are_other() -> None:
    provider, metered = _provider(MetricsConfig(max_values=2))
    for route in ("a", "b", "c", "a", "x" * (MAX_VALUE_LENGTH + 1)):
        _one(provider, route)
    with logical_request(operation="chat", tracer_provider=provider, retry_owner=None) as req:
        with req.attempt("a", attributes={v.RETRY_OWNER.key: "whoever"}):
            pass
    assert _counted(metered, i.ATTEMPTS, i.ROUTE) == {"a": 3, "b": 1, OVERFLOW: 2}
    assert _counted(metered, i.ATTEMPTS, i.RETRY_OWNER) == {"harness": 5, OVERFLOW: 1}


def _counted(metered: Metered, inst: i.Instrument, key: str) -> dict[object, int]:
    """Counts of ``inst`` by the value of attribute ``key``."""
    out: dict[object, int] = {}
    for point in metered.points().get(inst.name, []):
        value = (point.attributes or {}).get(key)
        out[value] = out.get(value, 0) + int(point.value)
    return out


def test_tenant_and_operation_only_when_configured() -> None:
    plain, without = _provider()
    _one(plain, tenant="acme")
    assert all(i.TENANT not in s for s in _series(without, i.ATTEMPTS))
    sliced, with_both = _provider(MetricsConfig(dimensions=frozenset(Dimension)))
    _one(sliced, tenant="acme")
    for inst in (i.ATTEMPTS, i.LOGICAL_REQUESTS, i.ATTEMPTS_PER_REQUEST):
        (series,) = _series(with_both, inst)
        assert series[i.TENANT] == "acme"
        assert series[i.OPERATION] == "chat"


def test_histograms_carry_the_request_trace_as_exemplar() -> None:
    provider, metered = _provider()
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("p") as a:
            a.set_outcome("rate_limited")
        with req.attempt("p") as a:
            a.set_backoff(delay_ms=100)
            a.set_outcome("success")
        retry_span = a.span.get_span_context().span_id
        trace_id = req.span.get_span_context().trace_id
        request_span = req.span.get_span_context().span_id
    points = metered.points()  # one collection: exemplars belong to the interval collected
    (point,) = points[i.ATTEMPTS_PER_REQUEST.name]
    (exemplar,) = point.exemplars
    assert (exemplar.trace_id, exemplar.span_id, exemplar.value) == (trace_id, request_span, 2)
    (backoff,) = points[i.BACKOFF_DELAY.name]
    assert backoff.exemplars[0].trace_id == trace_id
    assert backoff.exemplars[0].span_id == retry_span  # the retry's own span


def test_switched_off_it_creates_and_records_nothing() -> None:
    provider, metered = _provider(MetricsConfig(enabled=False))
    _one(provider)
    assert metered.points() == {}
    assert metered.processor is not None
    assert metered.processor.open_requests() == 0


def _handed(config: MetricsConfig | None = None) -> tuple[TracerProvider, Metered]:
    """The metrics processor handed ended spans by the stamping processor."""
    metered = Metered.unwired(config)
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor(metrics=metered.processor))
    return provider, metered


@pytest.mark.parametrize("also_added", [False, True])
def test_handed_spans_by_the_stamping_processor_it_counts_each_once(also_added: bool) -> None:
    """Handed the ended spans, it records what it does as a second processor, and once
    only when it is also added to the provider."""
    provider, metered = _handed()
    if also_added:
        assert metered.processor is not None
        provider.add_span_processor(metered.processor)
    _one(provider)
    _one(provider, route="backup")
    live = live_figures(metered.points())
    assert (live["logical_requests"], live["physical_attempts"]) == (2, 2)
    assert live["attempts_by_route"] == {"primary": 1, "backup": 1}


def test_handed_spans_and_switched_off_it_records_nothing() -> None:
    provider, metered = _handed(MetricsConfig(enabled=False))
    assert metered.processor is not None
    assert metered.processor.take_span_ends() is None
    _one(provider)
    assert metered.points() == {}
    assert metered.processor.open_requests() == 0


def test_the_stamping_processor_flushes_and_shuts_down_the_metrics_it_hands_spans_to() -> None:
    provider, metered = _handed()
    processor = metered.processor
    assert processor is not None
    _one(provider)
    assert _recorded_requests(processor) == 1  # recorded as its span ended
    assert provider.force_flush()
    _one(provider)
    provider.shutdown()
    assert (processor.open_requests(), _recorded_requests(processor)) == (0, 2)


def test_a_failure_is_contained_counted_and_the_application_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    provider, metered = _provider()

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(RequestTally, "ended", broken)
    _one(provider)
    _one(provider)
    assert metered.processor is not None
    assert metered.processor.force_flush()  # (ended requests are recorded a few at a time)
    assert metered.processor.errors == 2
    assert sum("further failures counted" in r.message for r in caplog.records) == 1
    monkeypatch.undo()
    _one(provider)
    assert live_figures(metered.points())["logical_requests"] == 1
    # a span the SDK would never hand over: counted, not raised
    metered.processor.on_end(object())  # type: ignore[arg-type]
    assert metered.processor.errors == 3


def test_odd_attribute_types_read_as_absent() -> None:
    provider, metered = _provider()
    odd = {
        v.BACKOFF_DELAY_MS.key: "200",
        v.COST_ACTUAL.key: True,
        v.HEDGE_ORDINAL.key: 1.5,
        v.FALLBACK.key: "yes",
    }
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("p", attributes=odd) as a:
            a.set_outcome("success")
    live = live_figures(metered.points())
    assert metered.processor is not None
    assert metered.processor.errors == 0
    assert (live["physical_attempts"], live["backoff_delay"], live["cost_total"]) == (
        1,
        (0, 0),
        {},
    )
    assert live["requests_with_fallback"] == 0


def test_requests_past_the_open_limit_keep_their_attempt_counts() -> None:
    provider, metered = _provider(MetricsConfig(max_open_requests=2))
    opened = [logical_request(operation="chat", tracer_provider=provider) for _ in range(3)]
    for req in opened:
        req.__enter__()
        with req.attempt("p") as a:
            a.set_outcome("success")
    assert metered.processor is not None
    assert (metered.processor.evicted, metered.processor.open_requests()) == (1, 2)
    for req in reversed(opened):
        req.__exit__(None, None, None)
    live = live_figures(metered.points())
    assert live["physical_attempts"] == 3
    assert live["logical_requests"] == 3  # each request span still ends and is counted
    assert live["histogram_attempts"] == 2  # the evicted one's attempt left its request


def test_attempts_are_counted_as_they_end_and_recorded_when_their_request_ends() -> None:
    provider, metered = _provider()
    processor = metered.processor
    assert processor is not None
    with logical_request(operation="chat", tracer_provider=provider) as req:
        for _ in range(19):
            with req.attempt("p") as a:
                a.set_outcome("unavailable")
        assert (processor.open_requests(), processor._open[req.id].attempts) == (
            1,
            19,
        )
        assert _recorded_requests(processor) == 0
    assert (processor.open_requests(), _recorded_requests(processor)) == (0, 1)
    assert _counted(metered, i.ATTEMPTS, i.ROUTE) == {"p": 19}
    (point,) = metered.points()[i.ATTEMPTS_PER_REQUEST.name]
    assert (point.count, point.sum) == (1, 19)  # all in their request's figures


def _recorded_requests(processor: AttemptMetricsProcessor) -> int:
    """Logical requests recorded so far (read without a collection, which records all)."""
    return sum(processor._totals[i.LOGICAL_REQUESTS.name].values())


def test_shutting_down_leaves_nothing_unrecorded() -> None:
    provider, metered = _provider()
    processor = metered.processor
    assert processor is not None
    _one(provider)
    provider.shutdown()
    assert (processor.open_requests(), _recorded_requests(processor)) == (0, 1)


def test_a_failure_recording_one_ended_request_leaves_the_others_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, metered = _provider()
    processor = metered.processor
    assert processor is not None
    record = processor._record
    calls: list[object] = []

    def first_fails(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("boom")
        record(*args)

    monkeypatch.setattr(processor, "_record", first_fails)
    for _ in range(8):
        _one(provider)
    assert (processor.errors, _recorded_requests(processor)) == (1, 7)


class _Unreadable(ReadableSpan):
    """A finished attempt span whose start time cannot be read."""

    @property
    def start_time(self) -> int | None:
        raise RuntimeError("unreadable")


def test_an_unreadable_attempt_span_is_counted_and_the_others_still_read() -> None:
    provider, metered = _provider()
    assert metered.processor is not None
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("p") as a:
            a.set_outcome("unavailable")
        unreadable = _Unreadable(
            "odd",
            context=a.span.get_span_context(),
            attributes={
                v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value,
                v.LOGICAL_REQUEST_ID.key: req.id,
            },
        )
        metered.processor.on_end(unreadable)
        assert metered.processor.errors == 1
        with req.attempt("p") as a:
            a.set_outcome("success")
    assert metered.processor.errors == 1
    assert live_figures(metered.points())["physical_attempts"] == 2


def test_a_span_whose_reading_ends_another_span_does_not_deadlock() -> None:
    """Reading an ended span runs its class's code: a property that ends (hands over)
    another attempt span re-enters the processor."""
    _, metered = _provider()
    processor = metered.processor
    assert processor is not None
    attrs = {v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value, v.LOGICAL_REQUEST_ID.key: "r1"}
    inner = ReadableSpan("inner", context=SpanContext(1, 2, is_remote=False), attributes=attrs)

    class Reentrant(ReadableSpan):
        @property
        def start_time(self) -> int | None:
            processor.on_end(inner)
            return 0

    outer = Reentrant("outer", context=SpanContext(1, 3, is_remote=False), attributes=attrs)
    reader = threading.Thread(target=processor.on_end, args=(outer,), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "the processor deadlocked on its own lock"
    assert (processor.open_requests(), processor.errors) == (1, 0)
    assert processor._open["r1"].attempts == 2  # both read, into one request


def test_a_failure_recording_an_evicted_request_leaves_the_ending_one_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider, metered = _provider(MetricsConfig(max_open_requests=1))
    assert metered.processor is not None
    held = logical_request(operation="chat", tracer_provider=provider)
    held.__enter__()
    with held.attempt("p") as a:
        a.set_outcome("unavailable")

    def broken(attempts: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(metered.processor, "_record_evicted", broken)
    try:
        _one(provider)  # its attempt evicts the held request's, whose recording fails
    finally:
        held.__exit__(None, None, None)
    assert metered.processor.errors == 1
    live = live_figures(metered.points())
    # both requests' spans counted; the attempt whose recording failed is not
    assert (live["logical_requests"], live["physical_attempts"]) == (2, 1)


def test_a_continuation_records_its_attempts_without_a_second_request() -> None:
    provider, metered = _provider()
    carrier: dict[str, str] = {}
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("p", layer="queue") as a:
            retryscope.inject(carrier)
            a.set_outcome("success")
    with (
        retryscope.extract(carrier, tracer_provider=provider) as continued,
        continued.attempt("p") as b,
    ):
        b.set_outcome("success")
    live = live_figures(metered.points())
    assert (live["logical_requests"], live["physical_attempts"]) == (1, 2)


def test_concurrent_requests_are_all_counted() -> None:
    provider, metered = _provider()

    def work() -> None:
        for _ in range(50):  # three attempts each: the threads' attempts share batches
            with logical_request(operation="chat", tracer_provider=provider) as req:
                for outcome in ("unavailable", "unavailable", "success"):
                    with req.attempt("p") as a:
                        a.set_outcome(outcome)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    live = live_figures(metered.points())
    assert (live["logical_requests"], live["physical_attempts"]) == (200, 600)
    assert (live["histogram_attempts"], live["retries"], live["retry_successes"]) == (600, 400, 200)


def test_settings_read_back_and_bad_ones_are_named() -> None:
    config = MetricsConfig(enabled=False, dimensions=frozenset({Dimension.TENANT}), max_values=7)
    assert MetricsConfig.from_env(config.to_env()) == config
    assert MetricsConfig.from_env(MetricsConfig().to_env()) == MetricsConfig()
    assert MetricsConfig.from_env({"RETRYSCOPE_METRICS": "OFF"}).enabled is False
    assert MetricsConfig.from_env({"RETRYSCOPE_METRICS_DIMENSIONS": "none"}).dimensions == set()
    with pytest.raises(ValueError, match="RETRYSCOPE_METRICS='maybe'"):
        MetricsConfig.from_env({"RETRYSCOPE_METRICS": "maybe"})
    with pytest.raises(ValueError, match="RETRYSCOPE_METRICS_DIMENSIONS='route'"):
        MetricsConfig.from_env({"RETRYSCOPE_METRICS_DIMENSIONS": "route"})
    with pytest.raises(ValueError, match="RETRYSCOPE_METRICS_MAX_VALUES='0'"):
        MetricsConfig.from_env({"RETRYSCOPE_METRICS_MAX_VALUES": "0"})
    with pytest.raises(ValueError, match="latency_window"):
        MetricsConfig(latency_window=0)


def test_value_bounds() -> None:
    kinds = Enumerated(v.OutcomeKind)
    assert kinds("rate_limited") == "rate_limited"
    assert (kinds("nope"), kinds(3), kinds(None)) == (OVERFLOW, OVERFLOW, None)
    cap = Capped(1)
    assert (cap("a"), cap("b"), cap("a"), cap(None), cap(7)) == ("a", OVERFLOW, "a", None, OVERFLOW)


@settings(deadline=None)  # each example runs a DuckDB query: no per-example time limit
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 20))
def test_rolling_median_is_duckdbs_median_of_the_window(values: list[int], size: int) -> None:
    window = RollingMedian(size)
    window.extend(float(x) for x in values)
    recent = values[-size:]
    assert window.median() == statistics.median(recent)
    with duckdb.connect() as con:  # its own: the module's default connection is shared
        (expected,) = con.execute(
            "SELECT quantile_cont(x, 0.5) FROM unnest($v::DOUBLE[]) t(x)", {"v": recent}
        ).fetchone() or (None,)
    assert window.median() == pytest.approx(expected)


def test_a_retry_follows_a_failure_in_its_group_and_a_hedge_is_none() -> None:
    provider, metered = _provider()
    clock = Clock(T0)
    with logical_request(operation="chat", tracer_provider=provider, clock=clock) as req:
        for outcome in ("success", "unavailable", "success"):
            with req.attempt("p") as a:
                a.set_outcome(outcome)
        with req.attempt("p") as a:
            a.set_outcome("unavailable")
        with req.attempt("p", hedge_ordinal=1) as hedge:
            hedge.set_outcome("success")
    retries = {
        (s[i.OUTCOME], s[i.RETRY]): n
        for s, n in (
            (dict(p.attributes or {}), int(p.value)) for p in metered.points()[i.ATTEMPTS.name]
        )
    }
    # 2 follows a success: no retry; 3 follows a failure: a retry; 4 follows a success; the
    # hedge follows a failure but is no retry
    assert retries == {("success", False): 2, ("retryable", False): 2, ("success", True): 1}


def test_processor_writes_nothing_onto_spans(tmp_path: Path) -> None:
    provider, metered = _provider()
    assert isinstance(metered.processor, AttemptMetricsProcessor)
    assert metered.processor.force_flush() is True
    metered.processor.shutdown()
    _one(provider)  # a shut-down processor still records: shutdown holds nothing to flush
    assert live_figures(metered.points())["logical_requests"] == 1


def test_spans_that_are_no_attempt_or_request_record_nothing() -> None:
    provider, metered = _provider()
    tracer = provider.get_tracer("third-party")
    with logical_request(operation="chat", tracer_provider=provider) as req:
        with req.attempt("p") as a:
            with tracer.start_as_current_span("tool call"):  # stamped, but no attempt
                pass
            a.set_outcome("success")
        with tracer.start_as_current_span("outside any attempt"):
            pass
    with tracer.start_as_current_span("outside any request"):
        pass
    live = live_figures(metered.points())
    assert (live["physical_attempts"], live["receiver_attempts"]) == (1, 1)
    assert (live["logical_requests"], live["histogram_requests"]) == (1, 1)
    assert metered.processor is not None
    assert (metered.processor.open_requests(), metered.processor.errors) == (0, 0)


def test_the_request_histograms_are_recorded_once_per_request() -> None:
    provider, metered = _provider()
    clock = Clock(T0)
    for n in (3, 1):
        with logical_request(operation="chat", tracer_provider=provider, clock=clock) as req:
            for k in range(n):
                with req.attempt("p") as a:
                    a.set_outcome("success" if k == n - 1 else "unavailable")
    (point,) = metered.points()[i.ATTEMPTS_PER_REQUEST.name]
    assert (point.count, point.sum, point.min, point.max) == (2, 4, 1, 3)


def test_an_attempt_is_a_send_exactly_when_no_attempt_is_beneath_it() -> None:
    provider, metered = _provider()
    clock = Clock(T0)
    with logical_request(operation="chat", tracer_provider=provider, clock=clock) as req:
        with req.attempt("p") as outer:  # a transport attempt beneath: not itself a send
            with req.attempt("p", layer="transport") as inner:
                inner.set_outcome("unavailable")
            with req.attempt("p", layer="transport") as inner:
                inner.set_outcome("success")
            outer.set_outcome("success")
        with req.attempt("q") as alone:  # nothing beneath: the receiver saw it
            alone.set_outcome("success")
    live = live_figures(metered.points())
    assert live["receiver_by_layer"] == {"transport": 2, "harness": 1}
    assert live["resends"] == 2  # the second send and "q": one operation (the model's rule)
    assert live["retries"] == 1  # the second transport attempt, after a failure


def test_doomed_dispatches_have_less_time_left_than_the_median() -> None:
    provider, metered = _provider()
    clock = Clock(T0)

    def request(left_ms: int) -> None:
        deadline = clock() + left_ms * 1_000_000
        with logical_request(
            operation="chat", tracer_provider=provider, clock=clock, deadline=deadline
        ) as req:
            with req.attempt("p") as a:
                clock.advance_ms(100)  # every attempt takes 100 ms: the median
                a.set_outcome("success")
        clock.advance_ms(1_000)

    request(100)  # exactly the median left: not doomed
    assert live_figures(metered.points())["doomed_dispatches"] == 0
    request(99)
    assert live_figures(metered.points())["doomed_dispatches"] == 1


def _wiring(processors: list[object]) -> list[tuple[str, bool]]:
    """Each processor's class, and for a stamping processor whether it hands spans on."""
    return [
        (type(p).__name__, isinstance(p, AttemptStampingProcessor) and p.metrics is not None)
        for p in processors
    ]


def test_the_configurator_hands_the_metrics_to_the_stamping_processor_it_adds() -> None:
    on, off = MetricsConfig(), MetricsConfig(enabled=False)
    export = SimpleSpanProcessor(InMemorySpanExporter())
    added = with_retryscope_processors([export], on)
    assert _wiring(added) == [("AttemptStampingProcessor", True), ("SimpleSpanProcessor", False)]
    assert added[0].metrics.config is on
    assert _wiring(with_retryscope_processors([export], off)) == [
        ("AttemptStampingProcessor", False),
        ("SimpleSpanProcessor", False),
    ]
    # a stamping processor passed in without metrics: they go right after it
    theirs = AttemptStampingProcessor()
    wired = with_retryscope_processors([export, theirs], on)
    assert wired[:2] == [export, theirs]
    assert _wiring(wired)[2] == ("AttemptMetricsProcessor", False)
    assert with_retryscope_processors([export, theirs], off) == [export, theirs]
    # metrics passed in, either way: none added
    metrics = AttemptMetricsProcessor(config=on)
    assert with_retryscope_processors([theirs, metrics], on) == [theirs, metrics]
    handing = AttemptStampingProcessor(metrics=AttemptMetricsProcessor(config=on))
    assert with_retryscope_processors([handing], on) == [handing]
    alone = with_retryscope_processors([metrics], on)
    assert _wiring(alone) == [
        ("AttemptStampingProcessor", False),
        ("AttemptMetricsProcessor", False),
    ]
