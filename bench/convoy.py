"""The exporter beside a CPU-bound application thread (the GIL convoy).

An application ends 5,000 spans/s through the pipeline the zero-code configurator builds
(``OTEL_PYTHON_CONFIGURATOR=retryscope``, ``OTEL_TRACES_EXPORTER=retryscope_parquet``: the
stamping and metrics processors, the gap-counting batch processor, the Parquet exporter,
each with its defaults) while another of its threads spins in pure Python. Each case runs in
a fresh interpreter (``python -m bench.convoy CASE RATE SECONDS``):

* ``idle``: no busy thread (the baseline);
* ``busy, SDK queue``: the busy thread, the batch queue at the SDK's 2,048 spans
  (``OTEL_BSP_MAX_QUEUE_SIZE``: before);
* ``busy``: the busy thread, the configurator's defaults (after).

Nothing in the pipeline changes the interpreter's GIL switch interval: the busy thread and
the exporter share the GIL as the application left it (5 ms by default).

A full run lasts 45 s per case, so that the exporter cuts one 200,000-row Parquet file (the
default ``rotate_rows``) while spans keep ending: the longest stall of the export thread.
Export latency is the time from a span's end to the return of the ``export`` call that
wrote it (it includes the batch processor's wait for a full batch); drops are what the data
set says: the ``queue_overflow`` telemetry-gap rows, and every span ended is either a row
or counted there. Throughput is the spans the application ended per second (it aims at
5,000) and the busy thread's loops per second.
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
from pathlib import Path
from typing import Any

from bench.harness import Result, Target
from bench.settings import Settings

RATE = 5_000
SDK_QUEUE = "2048"
CASES = {
    "idle": ("idle", None),
    "busy, SDK queue": ("busy", SDK_QUEUE),
    "busy": ("busy", None),
}


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def _counted(root: Path) -> tuple[int, int]:
    """Span rows and spans counted lost to a full queue, as the data set under ``root``
    says."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = lost = 0
    for path in root.rglob("*.parquet"):
        table = pq.read_table(path, columns=["span_role", "gap_reason", "gap_dropped_spans"])
        gap = pc.fill_null(pc.equal(table["span_role"], "telemetry_gap"), False)
        rows += table.num_rows - pc.sum(gap).as_py()
        overflow = pc.fill_null(pc.equal(table["gap_reason"], "queue_overflow"), False)
        lost += pc.sum(table.filter(overflow)["gap_dropped_spans"]).as_py() or 0
    return rows, lost


def child(case: str, rate: int, seconds: float) -> dict[str, Any]:
    """One case, in this process (configured by the environment): the figures as a dict."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult

    from retryscope.instrumentation import ParquetSpanExporter
    from retryscope.instrumentation._configurator import RetryscopeConfigurator

    latencies: list[float] = []
    longest = [0.0]
    export = ParquetSpanExporter.export

    def timed(self: ParquetSpanExporter, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        began = time.monotonic()
        result = export(self, spans)
        now = time.time_ns()
        longest[0] = max(longest[0], time.monotonic() - began)
        latencies.extend((now - (s.end_time or now)) / 1e6 for s in spans)
        return result

    ParquetSpanExporter.export = timed  # type: ignore[method-assign]
    root = Path(os.environ["RETRYSCOPE_PARQUET_DIR"])
    RetryscopeConfigurator().configure()
    provider = trace.get_tracer_provider()
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
    elapsed = time.monotonic() - start
    behind = elapsed - seconds
    stop.set()
    provider.shutdown()  # type: ignore[attr-defined]
    rows, dropped = _counted(root)
    latencies.sort()
    return {
        "ended": n,
        "exported": len(latencies),
        "rows": rows,
        "dropped": dropped,
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "max_ms": latencies[-1] if latencies else float("nan"),
        "longest_export_ms": longest[0] * 1e3,
        "producer_behind_s": behind,
        "spans_per_s": n / elapsed,
        "spins": spins,
        "spins_per_s": spins / elapsed,
    }


def _run_case(name: str, rate: int, seconds: float) -> dict[str, Any]:
    case, queue = CASES[name]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "RETRYSCOPE_PARQUET_", "RETRYSCOPE_METRICS"))
    }
    with tempfile.TemporaryDirectory(prefix="retryscope-bench-convoy-") as root:
        env |= {
            "OTEL_TRACES_EXPORTER": "retryscope_parquet",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "convoy",
            "RETRYSCOPE_PARQUET_DIR": root,
        }
        if queue is not None:
            env["OTEL_BSP_MAX_QUEUE_SIZE"] = queue
        done = subprocess.run(
            [sys.executable, "-m", "bench.convoy", case, str(rate), str(seconds)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=True,
        )
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    if figures["rows"] + figures["dropped"] != figures["ended"]:
        raise RuntimeError(f"{name}: spans neither written nor counted lost: {figures}")
    return figures


def run(settings: Settings) -> list[Result]:
    seconds = 45.0 if not settings.quick else 1.5
    figures = {name: _run_case(name, RATE, seconds) for name in CASES}
    idle, before, after = (figures[name] for name in CASES)

    def shown(f: dict[str, Any]) -> str:
        return (
            f"dropped {f['dropped']:,}  p50 {f['p50_ms']:.0f} ms  p99 {f['p99_ms']:.0f} ms  "
            f"longest export {f['longest_export_ms']:.0f} ms  {f['spans_per_s']:,.0f} spans/s  "
            f"busy thread {f['spins_per_s']:,.0f} loops/s"
        )

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
                "busy, SDK queue": f"{before['p99_ms']:.0f} ms",
                "busy-thread work (after/before)": (
                    f"{after['spins'] / max(1, before['spins']):.2f}×"
                ),
            },
        ),
    ]


if __name__ == "__main__":
    case, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(child(case, rate, seconds)))
