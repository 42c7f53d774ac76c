"""Target 1: the cost of stamping on the hot path of every span.

Three ways to create the same third-party span (an LLM HTTP client span with 12
attributes), all as children of an open span, on TracerProviders without exporters so only
span creation is measured:

* plain: no processor (the baseline);
* stamped: ``AttemptStampingProcessor`` inside ``logical_request(...)``/``req.attempt(...)``;
* baggage: opentelemetry-processor-baggage's ``BaggageSpanProcessor`` copying the same
  values from Baggage.

And attempt spans opened by the context API against plain spans that carry the same
attributes (the attempt span's full final attribute set, passed at start), on the same
provider with the stamping processor: 100 attempts per logical request against 100 plain
spans per parent span, so the request's own span is amortised and the request keeps a
bounded list of attempts, as in production.

Both also run in :data:`METRICS_PROCESSES` fresh processes (``python -m bench.child
metrics-overhead``) per SDK path — the private fast paths, and the public OpenTelemetry API
only (``RETRYSCOPE_SDK_PUBLIC_ONLY=1``, what an SDK with other internals gives) — each
interleaving four cases: the same spans without retryscope, the stamping processor alone,
the stamping processor handing ended spans to ``AttemptMetricsProcessor`` recording into a
MeterProvider with a reader (``AttemptStampingProcessor(metrics=...)``, as the
``retryscope`` configurator wires it), and the metrics processor added to the provider as a
second processor (the SDK calls both on every span). Printed side by side for both paths:
stamping's overhead (stamping / without retryscope) and the live metrics' (on / off), each
the median of the processes' ratios, since one process's ratio moves by about ±2 % from one
process to the next (``bench/RESULTS.md``). The package is plain Python. A small logical
request (two harness attempts, a retry after a rate limit, with backoff, cost and a
deadline), where the request-end recording is not amortised over 100 attempts, runs in this
process.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.processor.baggage import ALLOW_ALL_BAGGAGE_KEYS, BaggageSpanProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from bench.child import run_child
from bench.harness import Result, Target, Timings, interleave, micros
from bench.settings import Settings
from retryscope import AttemptStampingProcessor, LogicalRequest, current_scope, logical_request
from retryscope.instrumentation import AttemptMetricsProcessor, MetricsConfig
from retryscope.instrumentation.metrics._instruments import ATTEMPTS
from retryscope.vocabulary import ATTEMPT_ORDINAL, IDEMPOTENCY_DIGEST, LOGICAL_REQUEST_ID

THIRD_PARTY_ATTRIBUTES: Mapping[str, AttributeValue] = {
    "http.request.method": "POST",
    "url.full": "https://llm.internal.example/v1/chat/completions",
    "server.address": "llm.internal.example",
    "server.port": 443,
    "network.protocol.version": "1.1",
    "http.response.status_code": 200,
    "user_agent.original": "OpenAI/Python 1.99.0",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4.1",
    "gen_ai.operation.name": "chat",
    "gen_ai.usage.input_tokens": 812,
    "gen_ai.usage.output_tokens": 233,
}
REQUIRED_STAMP = (LOGICAL_REQUEST_ID.key, IDEMPOTENCY_DIGEST.key, ATTEMPT_ORDINAL.key)
DEADLINE_IN_NS = 3_600 * 10**9
RELEASE = "llama-3.3-70b@2026-10"
PER_REQUEST = 100  # attempts per logical request (or plain spans per parent) in a round
SPANS = (20_000, 300)
"""Third-party spans per stamped case (full, quick)."""
ATTEMPTS_PER_CASE = (10_000, 200)
"""Context-API attempt spans per attempt case (full, quick)."""
METRICS_PROCESSES = 3
"""Fresh processes per SDK path that each time the cases (the printed ratio: their median)."""
SDK_PATHS = {"fast": {}, "public": {"RETRYSCOPE_SDK_PUBLIC_ONLY": "1"}}
"""The environment of each SDK path's processes."""
METRICS_TARGET = Target(at_most=1.10, text="≤ 1.10×")


def _request(provider: TracerProvider) -> LogicalRequest:
    """A logical request as a harness opens it: tenant, idempotency key, payload, deadline."""
    return logical_request(
        operation="chat",
        tenant="acme",
        idempotency_key="bench-key",
        request={"messages": [{"role": "user", "content": "hello"}]},
        deadline=time.time_ns() + DEADLINE_IN_NS,
        tracer_provider=provider,
    )


@contextlib.contextmanager
def _request_scope(provider: TracerProvider) -> Iterator[None]:
    """An open logical request and harness attempt, as a harness has around its SDK call."""
    with _request(provider) as req, req.attempt("private-primary", route_release=RELEASE):
        yield


@contextlib.contextmanager
def _baggage_scope(stamp: Mapping[str, str]) -> Iterator[None]:
    """The stamp's values in Baggage, for the BaggageSpanProcessor to copy."""
    ctx = otel_context.get_current()
    for key, value in stamp.items():
        ctx = baggage.set_baggage(key, value, ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def _third_party_spans(tracer: Tracer, n: int) -> None:
    for _ in range(n):
        with tracer.start_as_current_span(
            "POST /v1/chat/completions", kind=SpanKind.CLIENT, attributes=THIRD_PARTY_ATTRIBUTES
        ):
            pass


def _metered(
    reader: InMemoryMetricReader | None = None, *, second_processor: bool = False
) -> TracerProvider:
    """A provider with the stamping processor handing ended spans to the metrics processor
    (or, ``second_processor``, with the metrics processor added after it), recording into a
    MeterProvider with a reader (as an application exporting metrics has)."""
    provider = TracerProvider()
    meters = MeterProvider(metric_readers=[reader or InMemoryMetricReader()])
    metrics = AttemptMetricsProcessor(meter_provider=meters, config=MetricsConfig())
    if second_processor:
        provider.add_span_processor(AttemptStampingProcessor())
        provider.add_span_processor(metrics)
    else:
        provider.add_span_processor(AttemptStampingProcessor(metrics=metrics))
    return provider


def _small_request(provider: TracerProvider) -> None:
    """A logical request as most are: a rate-limited attempt, a backoff, a success."""
    with _request(provider) as req:
        with req.attempt("private-primary", route_release=RELEASE) as first:
            first.set_cost(reserved=2_000, actual=150)
            first.set_outcome("rate_limited", http_status=429)
            first.set_decision("retry")
        with req.attempt("private-primary", route_release=RELEASE) as second:
            second.set_backoff(delay_ms=200, retry_after_ms=200)
            second.set_cost(reserved=2_000, actual=1_350)
            second.set_outcome("success")
            second.set_decision("complete")


def _check_metrics() -> None:
    """Both metered providers really record: a small request counts its two attempts."""
    for second_processor in (False, True):
        reader = InMemoryMetricReader()
        provider = _metered(reader, second_processor=second_processor)
        _small_request(provider)
        data = reader.get_metrics_data()
        attempts = [
            point.value
            for rm in (data.resource_metrics if data else ())
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == ATTEMPTS.name
            for point in metric.data.data_points
        ]
        if sum(attempts) != 2:
            raise RuntimeError(f"the metrics processor counted {attempts} attempts, not 2")
        provider.shutdown()


def _stamp_values(provider: TracerProvider) -> dict[str, str]:
    """The values the stamping processor puts on a span, as strings (Baggage holds strings)."""
    with _request_scope(provider):
        scope = current_scope()
        if scope is None:
            raise RuntimeError("no retryscope scope inside logical_request/attempt")
        return {key: str(value) for key, value in scope.stamp.items()}


def _captured(
    provider_setup: Callable[[TracerProvider], None], body: Callable[[TracerProvider], None]
) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider_setup(provider)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    body(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


def _check_stamping(stamp: Mapping[str, str]) -> None:
    """Both stamping cases really put the values on the third-party span."""

    def stamped(provider: TracerProvider) -> None:
        with _request_scope(provider):
            _third_party_spans(provider.get_tracer("bench.thirdparty"), 1)

    def bagged(provider: TracerProvider) -> None:
        with _baggage_scope(stamp):
            _third_party_spans(provider.get_tracer("bench.thirdparty"), 1)

    for setup, body, what in (
        (lambda p: p.add_span_processor(AttemptStampingProcessor()), stamped, "stamping"),
        (
            lambda p: p.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS)),
            bagged,
            "baggage",
        ),
    ):
        spans = [s for s in _captured(setup, body) if s.name.startswith("POST")]
        attrs = spans[0].attributes or {}
        missing = [k for k in REQUIRED_STAMP if k not in attrs]
        if missing:
            raise RuntimeError(f"{what} processor did not stamp {missing} on a third-party span")


def _attempt_attributes(
    provider_setup: Callable[[TracerProvider], None],
) -> dict[str, AttributeValue]:
    """The attributes a context-API attempt span ends up with (to give the plain span)."""

    def body(provider: TracerProvider) -> None:
        with _request_scope(provider):
            pass

    spans = [s for s in _captured(provider_setup, body) if s.name.startswith("attempt")]
    return dict(spans[0].attributes or {})


def _versus(
    title: str,
    timings: Timings,
    cases: tuple[str, str],
    per: int,
    target: Target | None = None,
) -> Result:
    """``cases`` = (case, baseline) side by side: the ratio of CPU time (what another
    process on the machine moves least), and each per item as off / on, with the wall-time
    ratio beside."""
    case, baseline = cases
    return Result(
        "hot path",
        title,
        timings.cpu_ratio(case, baseline),
        "×",
        target,
        {
            "CPU off": micros(timings.cpu_median(baseline), per),
            "on": micros(timings.cpu_median(case), per),
            "wall ratio": f"{timings.ratio(case, baseline):.2f}×",
        },
    )


def _stamped_case(provider: TracerProvider, n: int) -> Callable[[], None]:
    """``n`` third-party spans under one logical request and attempt on ``provider``."""

    def case() -> None:
        with _request_scope(provider):
            _third_party_spans(provider.get_tracer("bench.thirdparty"), n)

    return case


def _plain_spans_case(provider: TracerProvider, n: int) -> Callable[[], None]:
    """``n`` of the same third-party spans under a plain parent span (no retryscope)."""

    def case() -> None:
        tracer = provider.get_tracer("bench.thirdparty")
        with tracer.start_as_current_span("parent"):
            _third_party_spans(tracer, n)

    return case


def _plain_attempts_case(
    provider: TracerProvider, n: int, attributes: Mapping[str, AttributeValue]
) -> Callable[[], None]:
    """``n`` plain spans carrying an attempt span's attributes, :data:`PER_REQUEST` per
    parent span (no retryscope API)."""

    def case() -> None:
        tracer = provider.get_tracer("bench.plain")
        for _ in range(n // PER_REQUEST):
            with tracer.start_as_current_span("parent"):
                for _ in range(PER_REQUEST):
                    with tracer.start_as_current_span(
                        "attempt private-primary", kind=SpanKind.CLIENT, attributes=attributes
                    ):
                        pass

    return case


def _attempt_case(provider: TracerProvider, n: int) -> Callable[[], None]:
    """``n`` context-API attempt spans on ``provider``, :data:`PER_REQUEST` per request."""

    def case() -> None:
        for _ in range(n // PER_REQUEST):
            with _request(provider) as req:
                for _ in range(PER_REQUEST):
                    with req.attempt("private-primary", route_release=RELEASE):
                        pass

    return case


def metrics_overhead(*, quick: bool, rounds: int) -> dict[str, Any]:
    """One process's cases (``python -m bench.child metrics-overhead``): the stamped span
    and the context-API attempt span without retryscope ("plain"), with the stamping
    processor alone ("off"), handing spans to the metrics processor ("on") and with the
    metrics processor as a second processor ("second"), interleaved. CPU and wall medians
    per case, on the SDK paths this process's environment selects."""
    settings = Settings(quick=quick, rounds=rounds)
    _check_metrics()
    stamping = TracerProvider()
    stamping.add_span_processor(AttemptStampingProcessor())
    providers = {
        "off": stamping,
        "on": _metered(),
        "second": _metered(second_processor=True),
    }
    sizes = {"stamped": settings.scaled(*SPANS), "attempt": settings.scaled(*ATTEMPTS_PER_CASE)}
    attributes = _attempt_attributes(lambda p: p.add_span_processor(AttemptStampingProcessor()))
    plain = {
        "stamped": _plain_spans_case(TracerProvider(), sizes["stamped"]),
        "attempt": _plain_attempts_case(TracerProvider(), sizes["attempt"], attributes),
    }
    out: dict[str, Any] = {"items": sizes}
    for name, make in (("stamped", _stamped_case), ("attempt", _attempt_case)):
        cases = {"plain": plain[name]}
        cases.update({case: make(provider, sizes[name]) for case, provider in providers.items()})
        timings = interleave(cases, rounds=rounds)
        out[name] = {
            case: {"cpu": timings.cpu_median(case), "wall": timings.median(case)} for case in cases
        }
    return out


_SPANS = (("stamped", "stamped third-party span"), ("attempt", "context-API attempt"))


def _overhead_results(settings: Settings) -> list[Result]:
    """Stamping's overhead (stamping / plain) and the metrics' (on / off, and as a second
    processor / off), on the fast and the public SDK paths side by side: each the median
    over :data:`METRICS_PROCESSES` fresh processes' ratios (CPU time), their range and the
    per-item medians beside it."""
    args = ["--rounds", str(settings.rounds), *(["--quick"] if settings.quick else [])]
    runs = {
        path: [run_child("metrics-overhead", *args, env=env) for _ in range(METRICS_PROCESSES)]
        for path, env in SDK_PATHS.items()
    }
    results = []
    for case, baseline, what, target in (
        ("off", "plain", "stamping / no retryscope", None),
        ("on", "off", "metrics on / off", METRICS_TARGET),
        ("second", "off", "metrics as a second processor / off", None),
    ):
        for name, span in _SPANS:
            for path, done in runs.items():
                per = done[0]["items"][name]
                ratios = sorted(r[name][case]["cpu"] / r[name][baseline]["cpu"] for r in done)
                walls = [r[name][case]["wall"] / r[name][baseline]["wall"] for r in done]
                off = statistics.median(r[name][baseline]["cpu"] for r in done)
                results.append(
                    Result(
                        "hot path",
                        f"{span}: {what} ({path} SDK paths, plain Python)",
                        statistics.median(ratios),
                        "×",
                        target,
                        {
                            "CPU before": micros(off, per),
                            "after": micros(
                                statistics.median(r[name][case]["cpu"] for r in done), per
                            ),
                            f"{len(done)} processes": f"{ratios[0]:.2f}–{ratios[-1]:.2f}×",
                            "wall ratio": f"{statistics.median(walls):.2f}×",
                        },
                    )
                )
    return results


def run(settings: Settings) -> list[Result]:
    n = settings.scaled(*SPANS)
    rounds = settings.rounds

    plain = TracerProvider()
    stamping = TracerProvider()
    stamping.add_span_processor(AttemptStampingProcessor())
    bagging = TracerProvider()
    bagging.add_span_processor(BaggageSpanProcessor(ALLOW_ALL_BAGGAGE_KEYS))
    metering = _metered()
    stamp = _stamp_values(TracerProvider())
    _check_stamping(stamp)
    _check_metrics()

    def case_plain() -> None:
        tracer = plain.get_tracer("bench.thirdparty")
        with tracer.start_as_current_span("parent"):
            _third_party_spans(tracer, n)

    case_stamped = _stamped_case(stamping, n)

    def case_baggage() -> None:
        tracer = bagging.get_tracer("bench.thirdparty")
        with tracer.start_as_current_span("parent"), _baggage_scope(stamp):
            _third_party_spans(tracer, n)

    spans = interleave(
        {
            "plain": case_plain,
            "stamped": case_stamped,
            "baggage": case_baggage,
        },
        rounds=rounds,
    )
    t_plain, t_stamped, t_bag = (spans.median(c) for c in ("plain", "stamped", "baggage"))
    added_stamp, added_bag = t_stamped - t_plain, t_bag - t_plain

    attempts_n = settings.scaled(*ATTEMPTS_PER_CASE)
    attempt_attrs = _attempt_attributes(lambda p: p.add_span_processor(AttemptStampingProcessor()))

    attempts = interleave(
        {
            "plain": _plain_attempts_case(stamping, attempts_n, attempt_attrs),
            "context": _attempt_case(stamping, attempts_n),
        },
        rounds=rounds,
    )

    requests_n = settings.scaled(4_000, 100)

    def small_requests(provider: TracerProvider) -> Callable[[], None]:
        def case() -> None:
            for _ in range(requests_n):
                _small_request(provider)

        return case

    requests = interleave(
        {"off": small_requests(stamping), "on": small_requests(metering)}, rounds=rounds
    )
    name = "hot path"
    return [
        Result(
            name,
            "stamped third-party span / plain span",
            spans.ratio("stamped", "plain"),
            "×",
            Target(at_most=1.15, text="≤ 1.15×"),
            {"plain": micros(t_plain, n), "stamped": micros(t_stamped, n)},
        ),
        Result(
            name,
            "added time: stamping / BaggageSpanProcessor",
            added_stamp / added_bag if added_bag > 0 else float("inf"),
            "×",
            Target(at_most=1.0, text="< 1× (less added)"),
            {
                "stamping adds": micros(added_stamp, n),
                "baggage adds": micros(added_bag, n),
                "baggage ratio": f"{spans.ratio('baggage', 'plain'):.2f}×",
            },
        ),
        Result(
            name,
            f"context-API attempt / plain span ({len(attempt_attrs)} attrs)",
            attempts.ratio("context", "plain"),
            "×",
            Target(at_most=1.3, text="≤ 1.3×"),
            {
                "plain": micros(attempts.median("plain"), attempts_n),
                "attempt": micros(attempts.median("context"), attempts_n),
            },
        ),
        *_overhead_results(settings),
        _versus(
            "logical request of 2 attempts: metrics on / off", requests, ("on", "off"), requests_n
        ),
    ]
