"""A stamped send late in a long attempt against one early in an attempt (goal: ≤ 1.2×).

A long agent step or an indexing job makes thousands of distinct calls inside one harness
attempt. Each is an HTTP client span (distinct URL, CLIENT kind) that the stamping
processor takes for a send and matches against the earlier operations of its attempt
(:class:`~retryscope.instrumentation._sends.SendLedger`). Each round opens, per case, a
fresh logical request and attempt on a provider with only the stamping processor, makes
the case's earlier distinct calls untimed (1, or :data:`EARLIER` [quick: 1,000]), then
times :data:`TIMED` further distinct calls, CPU time (the figure a loaded machine disturbs
least); the cases alternate in order from round to round. Printed: the late send's median
CPU time over the early one's.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from bench.harness import Result, Target, micros
from bench.settings import Settings
from retryscope import AttemptStampingProcessor, logical_request

EARLIER = (10_000, 1_000)
"""Distinct calls made before the timed ones in the late case (full, quick)."""
TIMED = 300
"""Distinct calls timed per case and round."""
TARGET = Target(at_most=1.2, text="≤ 1.2×")


def _calls(start: int, n: int) -> list[Mapping[str, AttributeValue]]:
    """Start attributes of ``n`` distinct HTTP calls (their URLs differ)."""
    return [
        {
            "http.request.method": "GET",
            "url.full": f"https://search.internal.example/v1/documents/{i}",
            "server.address": "search.internal.example",
            "server.port": 443,
        }
        for i in range(start, start + n)
    ]


def _send(tracer: Tracer, calls: Sequence[Mapping[str, AttributeValue]]) -> None:
    for attributes in calls:
        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT, attributes=attributes):
            pass


def _timed_after(provider: TracerProvider, earlier: int) -> float:
    """CPU seconds of :data:`TIMED` distinct calls made after ``earlier`` distinct calls, all
    in one attempt of a fresh logical request."""
    tracer = provider.get_tracer("bench.long_attempt")
    timed, before = _calls(0, TIMED), _calls(TIMED, earlier)
    with logical_request(operation="index", tracer_provider=provider) as req:
        with req.attempt("search"):
            _send(tracer, before)
            start = time.process_time()
            _send(tracer, timed)
            return time.process_time() - start


def run(settings: Settings) -> list[Result]:
    earlier = settings.scaled(*EARLIER)
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    cases = {"early": 1, "late": earlier}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    _timed_after(provider, 1)  # warm-up
    for r in range(settings.rounds):
        for name in list(cases)[r % 2 :] + list(cases)[: r % 2]:
            gc.collect()
            cpu[name].append(_timed_after(provider, cases[name]))
    provider.shutdown()
    early, late = (statistics.median(cpu[name]) for name in cases)
    return [
        Result(
            "long_attempt",
            f"stamped send after {earlier:,} distinct calls / after 1 (one attempt)",
            late / early,
            "×",
            TARGET,
            {
                "after 1": micros(early, TIMED),
                f"after {earlier:,}": micros(late, TIMED),
                "CPU": "process time",
                "rounds": str(settings.rounds),
            },
        )
    ]
