"""The exporter beside a CPU-bound application thread (the GIL convoy).

An application ends 5,000 spans/s through the production pipeline (stamping processor,
gap-counting batch processor with the SDK's defaults, Parquet exporter) while another of
its threads spins in pure Python. Each case runs in a fresh interpreter
(``python -m bench.convoy CASE RATE SECONDS``):

* ``idle``: no busy thread (the baseline);
* ``busy, interpreter's interval``: the busy thread, the exporter with
  ``switch_interval_s=0`` (the interpreter's 5 ms switch interval throughout: before);
* ``busy``: the busy thread, the exporter's default ``switch_interval_s`` (after).

Export latency is the time from a span's end to the return of the ``export`` call that
wrote it (it includes the batch processor's wait for a full batch); drops are the spans
the batch processor's queue turned away (its ``dropped_spans``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.harness import Result, Target
from bench.settings import Settings

RATE = 5_000
CASES = {
    "idle": ("idle", None),
    "busy, interpreter's interval": ("busy", "0"),
    "busy": ("busy", None),
}


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def child(case: str, rate: int, seconds: float) -> dict[str, Any]:
    """One case, in this process: the figures as a dict."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    from retryscope.instrumentation import (
        AttemptStampingProcessor,
        GapCountingBatchSpanProcessor,
        ParquetSpanExporter,
    )

    latencies: list[float] = []

    class Timed(ParquetSpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            result = super().export(spans)
            now = time.time_ns()
            latencies.extend((now - (s.end_time or now)) / 1e6 for s in spans)
            return result

    with tempfile.TemporaryDirectory(prefix="retryscope-bench-convoy-") as root:
        exporter = Timed(root)
        provider = TracerProvider(resource=Resource.create({"service.name": "convoy"}))
        provider.add_span_processor(AttemptStampingProcessor())
        batch = GapCountingBatchSpanProcessor(exporter)
        provider.add_span_processor(batch)
        tracer = provider.get_tracer("bench.convoy")
        stop = threading.Event()
        spins = 0

        def spin() -> None:
            nonlocal spins
            while not stop.is_set():
                x = 0
                for i in range(10_000):
                    x += i * i
                spins += 1

        busy = threading.Thread(target=spin, daemon=True) if case == "busy" else None
        if busy is not None:
            busy.start()
        n = int(rate * seconds)
        start = time.monotonic()
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            span = tracer.start_span(
                "work", attributes={"n": i, "retryscope.logical_request.id": f"r{i % 64}"}
            )
            span.end()
        stop.set()
        provider.force_flush(120_000)
        provider.shutdown()
    latencies.sort()
    return {
        "ended": n,
        "exported": len(latencies),
        "dropped": batch.dropped_spans,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "spins": spins,
    }


def _run_case(name: str, rate: int, seconds: float) -> dict[str, Any]:
    case, interval = CASES[name]
    env = dict(os.environ)
    if interval is not None:
        env["RETRYSCOPE_PARQUET_SWITCH_INTERVAL_S"] = interval
    else:
        env.pop("RETRYSCOPE_PARQUET_SWITCH_INTERVAL_S", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench.convoy", case, str(rate), str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def run(settings: Settings) -> list[Result]:
    seconds = 10.0 if not settings.quick else 1.5
    figures = {name: _run_case(name, RATE, seconds) for name in CASES}
    idle, before, after = (figures[name] for name in CASES)

    def shown(f: dict[str, Any]) -> str:
        return f"dropped {f['dropped']:,}  p50 {f['p50_ms']:.0f} ms  p99 {f['p99_ms']:.0f} ms"

    def dropped_share(f: dict[str, Any]) -> float:
        return float(f["dropped"]) / f["ended"]

    return [
        Result(
            "convoy",
            f"share of spans dropped at {RATE:,}/s beside a busy thread",
            dropped_share(after),
            "%",
            Target(at_most=0.0, text="0"),
            {"after": shown(after), "before": shown(before), "idle": shown(idle)},
        ),
        Result(
            "convoy",
            "export latency p99 beside a busy thread / idle",
            after["p99_ms"] / idle["p99_ms"],
            "×",
            None,
            {
                "busy": f"{after['p99_ms']:.0f} ms",
                "idle": f"{idle['p99_ms']:.0f} ms",
                "busy, interpreter's interval": f"{before['p99_ms']:.0f} ms",
                "busy-thread work (after/before)": (
                    f"{after['spins'] / max(1, before['spins']):.2f}×"
                ),
            },
        ),
    ]


if __name__ == "__main__":
    case, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(child(case, rate, seconds)))
