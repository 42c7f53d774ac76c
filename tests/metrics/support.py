"""Live figures read from a real MeterProvider, and the same figures from the report.

:func:`live_figures` reads an ``InMemoryMetricReader``'s collection of the retryscope
instruments into one flat dict; :func:`report_figures` builds the same dict from
``build_report`` over the Parquet data set (and, for the few figures the report does not
print, from the model's tables the report is computed from). On the same traffic the two
must be equal.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import TracerProvider

from retryscope.analytics import build_report
from retryscope.instrumentation import AttemptMetricsProcessor, MetricsConfig
from retryscope.instrumentation.metrics import _instruments as i

Figures = dict[str, Any]


@dataclass
class Metered:
    """A MeterProvider with an in-memory reader and the processor recording into it."""

    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    processor: AttemptMetricsProcessor | None

    @classmethod
    def on_meter_provider(cls) -> Metered:
        """A MeterProvider and its reader, for a caller that adds the processor itself."""
        reader = InMemoryMetricReader()
        return cls(reader, MeterProvider(metric_readers=[reader]), None)

    @classmethod
    def unwired(cls, config: MetricsConfig | None = None) -> Metered:
        """The processor recording into a new MeterProvider, not added to any provider (for
        a stamping processor to hand ended spans to: ``metrics=metered.processor``)."""
        metered = cls.on_meter_provider()
        metered.processor = AttemptMetricsProcessor(
            meter_provider=metered.meter_provider, config=config or MetricsConfig()
        )
        return metered

    @classmethod
    def on(cls, tracer_provider: TracerProvider, config: MetricsConfig | None = None) -> Metered:
        """The processor on ``tracer_provider`` (a second span processor), recording into a
        new MeterProvider."""
        metered = cls.unwired(config)
        assert metered.processor is not None
        tracer_provider.add_span_processor(metered.processor)
        return metered

    def points(self) -> dict[str, list[Any]]:
        """Every data point of the retryscope meter, by instrument name."""
        return collected(self.reader)


def collected(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            if sm.scope.name != "retryscope":
                continue
            for metric in sm.metrics:
                out[metric.name].extend(metric.data.data_points)
    return out


def _sum(points: list[NumberDataPoint], **where: Any) -> int:
    return int(sum(p.value for p in points if _match(p.attributes, where)))


def _match(attrs: Mapping[str, Any] | None, where: Mapping[str, Any]) -> bool:
    attrs = attrs or {}
    return all(attrs.get(k) == v for k, v in where.items())


def _by(points: list[NumberDataPoint], key: str, **where: Any) -> dict[Any, int]:
    out: Counter[Any] = Counter()
    for p in points:
        if _match(p.attributes, where):
            out[(p.attributes or {}).get(key)] += int(p.value)
    return {k: v for k, v in out.items() if v}


def _quantile_disc(points: list[HistogramDataPoint], q: float) -> int:
    """DuckDB's ``quantile_disc`` of the recorded values, from the buckets (exact while
    every value falls in a bucket of one integer: at most 10)."""
    counts: Counter[float] = Counter()
    for p in points:
        for bound, n in zip((*p.explicit_bounds, math.inf), p.bucket_counts, strict=True):
            counts[bound] += n
    values = [bound for bound in sorted(counts) for _ in range(counts[bound])]
    if not values:
        return 0
    assert values[-1] <= 10, "beyond the unit buckets the distribution is not exact"
    return int(values[max(0, math.ceil(len(values) * q) - 1)])


def _ratio(n: int, d: int) -> float:
    """``rs_ratio``: n / d, 0.0 without a denominator."""
    return n / d if d > 0 else 0.0


def _histogram(points: list[HistogramDataPoint]) -> tuple[int, int, int]:
    """(count, sum, max) over every series."""
    count = sum(p.count for p in points)
    total = sum(p.sum for p in points)
    top = max((p.max for p in points if p.count), default=0)
    return int(count), int(total), int(top)


def live_figures(points: Mapping[str, list[Any]]) -> Figures:
    """The figures the live instruments give."""
    attempts, sends = points.get(i.ATTEMPTS.name, []), points.get(i.SENDS.name, [])
    requests = points.get(i.LOGICAL_REQUESTS.name, [])
    per_request = points.get(i.ATTEMPTS_PER_REQUEST.name, [])
    product = points.get(i.NESTED_RETRY_PRODUCT.name, [])
    cost = points.get(i.COST.name, [])
    fallbacks = points.get(i.FALLBACKS.name, [])
    count, total, top = _histogram(per_request)
    operations = _sum(points.get(i.OPERATIONS.name, []))
    nested, _, max_product = _histogram(product)
    backoff = _histogram(points.get(i.BACKOFF_DELAY.name, []))
    hint = _histogram(points.get(i.RETRY_AFTER.name, []))
    return {
        "logical_requests": _sum(requests),
        "terminals": {k or "unknown": n for k, n in _by(requests, i.TERMINAL).items()},
        "physical_attempts": _sum(attempts),
        "attempts_by_layer": _by(attempts, i.LAYER),
        "attempts_by_route": _by(attempts, i.ROUTE),
        "retries": _sum(attempts, **{i.RETRY: True}),
        "retry_successes": _sum(attempts, **{i.RETRY: True, i.OUTCOME: "success"}),
        "receiver_attempts": _sum(sends),
        "receiver_by_layer": _by(sends, i.LAYER),
        "receiver_by_route": _by(sends, i.ROUTE),
        "resends": _sum(sends, **{i.RESEND: True}),
        "operations": operations,
        "sends_per_request": _ratio(_sum(sends), _sum(requests)),
        "amplification_ratio": _ratio(_sum(sends), operations),
        "histogram_sends_per_request": _ratio(total, count),
        "histogram_requests": count,
        "histogram_attempts": total,
        "max_attempts_per_request": top,
        "p99_attempts_per_request": _quantile_disc(per_request, 0.99),
        "nested_retry_requests": nested,
        "max_nested_multiplication": max_product,
        "cost_total": _by(cost, i.CURRENCY),
        "cost_wasted": _by(cost, i.CURRENCY, **{i.WASTED: True}),
        "cost_estimated": _by(cost, i.CURRENCY, **{i.ESTIMATED: True}),
        "requests_with_fallback": _sum(fallbacks),
        "fallback_successes": _sum(fallbacks, **{i.FALLBACK_SUCCESS: True}),
        "fallback_quality": _by(fallbacks, i.FALLBACK_QUALITY, **{i.FALLBACK_SUCCESS: True}),
        "fallback_to_routes": _by(fallbacks, i.TO_ROUTE, **{i.FALLBACK_SUCCESS: True}),
        "boundary_widened_requests": _sum(points.get(i.BOUNDARY_WIDENED.name, [])),
        "deadline_exhausted": _sum(points.get(i.DEADLINE_EXHAUSTED.name, [])),
        "late_successes": _sum(points.get(i.LATE_SUCCESSES.name, [])),
        "doomed_dispatches": _sum(points.get(i.DOOMED_DISPATCHES.name, [])),
        "not_before_ignored": _sum(points.get(i.NOT_BEFORE_VIOLATIONS.name, [])),
        "backoff_delay": backoff[:2],
        "retry_after": hint[:2],
    }


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...]:
    row = con.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def report_figures(con: duckdb.DuckDBPyConnection) -> Figures:
    """The same figures from the Parquet report (and the model tables it reads)."""
    report = build_report(con)
    amp, fb, dl = report["amplification"], report["fallback"], report["deadline"]
    effectiveness = report["retry_effectiveness"]["by_kind"]
    currencies = report["cost"]["by_currency"]
    (resends,) = _one(con, "SELECT count(*) FILTER (WHERE is_repeat) FROM receiver_traffic")
    fallback_routes = dict(
        con.execute(
            "SELECT fallback_route, count(*) FROM request_facts WHERE fallback_success GROUP BY 1"
        ).fetchall()
    )
    backoff = _one(
        con, "SELECT count(backoff_delay_ms), coalesce(sum(backoff_delay_ms), 0) FROM attempt_facts"
    )
    hint = _one(
        con, "SELECT count(retry_after_ms), coalesce(sum(retry_after_ms), 0) FROM attempt_facts"
    )
    quality = {
        "bound": fb["quality_fallback_successes"],
        "degraded": fb["degraded_fallbacks"],
        "unverified": fb["unverified_fallbacks"],
    }
    quality["mismatch"] = fb["fallback_successes"] - sum(quality.values())
    return {
        "logical_requests": report["logical_requests"],
        "terminals": report["terminals"],
        "physical_attempts": report["physical_attempts"],
        "attempts_by_layer": {r["layer"]: r["physical_attempts"] for r in amp["by_layer"]},
        "attempts_by_route": {r["route_id"]: r["attempts"] for r in report["routes"]},
        "retries": sum(r["retries"] for r in effectiveness),
        "retry_successes": sum(r["successes"] for r in effectiveness),
        "receiver_attempts": report["receiver_attempts"],
        "receiver_by_layer": {
            r["layer"]: r["receiver_attempts"] for r in amp["by_layer"] if r["receiver_attempts"]
        },
        "receiver_by_route": {
            r["route_id"]: r["receiver_attempts"]
            for r in report["routes"]
            if r["receiver_attempts"]
        },
        "resends": resends,
        "operations": report["operations"],
        "sends_per_request": report["sends_per_request"],
        "amplification_ratio": report["amplification_ratio"],
        "histogram_sends_per_request": report["sends_per_request"],
        "histogram_requests": report["logical_requests"],
        "histogram_attempts": report["receiver_attempts"],
        "max_attempts_per_request": amp["max_attempts_per_request"],
        "p99_attempts_per_request": amp["p99_attempts_per_request"],
        "nested_retry_requests": amp["nested_retry_requests"],
        "max_nested_multiplication": amp["max_nested_multiplication"],
        "cost_total": {r["currency"]: r["total_micros"] for r in currencies if r["total_micros"]},
        "cost_wasted": {
            r["currency"]: r["wasted_micros"] for r in currencies if r["wasted_micros"]
        },
        "cost_estimated": {
            r["currency"]: r["estimated_micros"] for r in currencies if r["estimated_micros"]
        },
        "requests_with_fallback": report["requests_with_fallback"],
        "fallback_successes": fb["fallback_successes"],
        "fallback_quality": {k: n for k, n in quality.items() if n},
        "fallback_to_routes": fallback_routes,
        "boundary_widened_requests": fb["boundary_widened_requests"],
        "deadline_exhausted": report["deadline_exhausted"],
        "late_successes": dl["late_successes"],
        "doomed_dispatches": dl["doomed_dispatches"],
        "not_before_ignored": report["violations"].get("not_before_ignored", 0),
        "backoff_delay": backoff,
        "retry_after": hint,
    }


def differences(live: Figures, report: Figures) -> Iterator[str]:
    """Each figure on which the two disagree, as ``name: live != report``."""
    for name in report:
        if live.get(name) != report[name]:
            yield f"{name}: live {live.get(name)!r} != report {report[name]!r}"
