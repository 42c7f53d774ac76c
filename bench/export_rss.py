"""Peak RSS of exporting many spans through ``ParquetSpanExporter``.

    python -m bench.export_rss --spans 1000000 [--out DIR]

Prints one JSON line: spans, files, seconds, RSS (MiB) after the first file was written
("warm") and at the end ("peak"), and their difference. Memory must not grow with the span
count: the exporter holds at most one file's worth of rows (``rotate_rows``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from bench.rss import peak_rss_bytes
from retryscope.instrumentation import ParquetSpanExporter

BATCH = 512


def _peak_mib() -> float:
    return peak_rss_bytes() / (1 << 20)


def _batch(start: int, count: int, res: Resource, t0: int) -> list[ReadableSpan]:
    spans = []
    for i in range(start, start + count):
        spans.append(
            ReadableSpan(
                name="attempt primary",
                context=SpanContext(i + 1, i + 1, False, TraceFlags(1)),
                kind=SpanKind.CLIENT,
                resource=res,
                attributes={
                    "retryscope.span.role": "attempt",
                    "retryscope.logical_request.id": f"req-{i // 3:012d}",
                    "retryscope.attempt.ordinal": i % 3 + 1,
                    "retryscope.route.id": "primary",
                    "http.response.status_code": 429 if i % 3 else 200,
                    "extra": "x" * 32,
                },
                start_time=t0 + i * 1000,
                end_time=t0 + i * 1000 + 500,
            )
        )
    return spans


def run(spans: int, out: Path, rotate_rows: int) -> dict[str, float | None]:
    res = Resource.create({"service.name": "bench"})
    exporter = ParquetSpanExporter(out, rotate_rows=rotate_rows, partitioning="none")
    t0 = time.time_ns()
    started = time.perf_counter()
    warm = 0.0
    for start in range(0, spans, BATCH):
        exporter.export(_batch(start, min(BATCH, spans - start), res, t0))
        if not warm and exporter.files_written:
            warm = _peak_mib()
    exporter.shutdown()
    peak = _peak_mib()
    return {
        "spans": spans,
        "files": sum(1 for _ in out.rglob("spans-*.parquet")),
        "seconds": round(time.perf_counter() - started, 2),
        "warm_mib": round(warm, 1) if warm else None,  # None: no file before the end
        "peak_mib": round(peak, 1),
        "growth_mib": round(peak - warm, 1) if warm else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--rotate-rows", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.spans, args.out or Path(tmp), args.rotate_rows)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
