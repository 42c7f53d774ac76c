"""Load: threads and an asyncio harness through the real BatchSpanProcessor into Parquet.

Span counts and per-request attempt ordinals in the data equal what the application
created, or the shortfall equals the drop count the pipeline reported (queue overflow counted
by ``GapCountingBatchSpanProcessor``, persisted as telemetry-gap rows) — exactly. Peak RSS of
the writing process (a child, measured with ``getrusage``) stays under ``RSS_CEILING_MB``.

``make test`` runs modest sizes; ``RETRYSCOPE_LOAD_FULL=1`` runs the sizes of the issue
(8 threads x 50,000 spans; 1,000 concurrent asyncio requests either way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytestmark = pytest.mark.load

FULL = os.environ.get("RETRYSCOPE_LOAD_FULL") == "1"
THREADS = 8
SPANS_PER_THREAD = 50_000 if FULL else 2_000
ASYNC_REQUESTS = 1_000
ATTEMPTS = 3  # per logical request: 1 request span + 3 attempt spans
RSS_CEILING_MB = 900 if FULL else 400  # measured: 450-700 MB full, ~200 MB modest

CHILD = r"""
import asyncio, json, sys, threading
sys.path.insert(0, sys.argv.pop())
from bench.rss import peak_rss_bytes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from retryscope.instrumentation import (
    AttemptStampingProcessor, GapCountingBatchSpanProcessor, ParquetSpanExporter)
import retryscope

mode, out, threads, per_thread, requests, attempts, queue = sys.argv[1:8]
threads, per_thread, requests, attempts, queue = map(
    int, (threads, per_thread, requests, attempts, queue))
exporter = ParquetSpanExporter(out)
provider = TracerProvider(resource=Resource.create({"service.name": "load"}))
provider.add_span_processor(AttemptStampingProcessor())
batch = GapCountingBatchSpanProcessor(
    exporter, max_queue_size=queue, max_export_batch_size=min(1024, queue))
provider.add_span_processor(batch)
created = []  # request ids, in creation order, per worker (list.append is atomic)

def one_request(worker, i):
    with retryscope.logical_request(
        operation="load", tenant=f"t{worker}", idempotency_key=f"k-{worker}-{i}",
        tracer_provider=provider,
    ) as req:
        for n in range(attempts):
            with req.attempt("primary" if n < attempts - 1 else "fallback",
                             route_priority=0 if n < attempts - 1 else 1) as a:
                a.set_outcome("success" if n == attempts - 1 else "rate_limited")
    created.append(req.id)

if mode == "threads":
    per_request = attempts + 1
    def work(w):
        for i in range(per_thread // per_request):
            one_request(w, i)
    pool = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for t in pool: t.start()
    for t in pool: t.join()
else:
    async def one(i):
        with retryscope.logical_request(
            operation="load", tenant="async", idempotency_key=f"a-{i}", tracer_provider=provider
        ) as req:
            for n in range(attempts):
                with req.attempt("primary", layer="harness") as a:
                    await asyncio.sleep(0)  # every request interleaves with every other
                    a.set_outcome("success" if n == attempts - 1 else "unavailable")
                await asyncio.sleep(0)
        created.append(req.id)
    async def main():
        await asyncio.gather(*(one(i) for i in range(requests)))
    asyncio.run(main())

provider.force_flush(120_000)
exporter.force_flush(120_000)
provider.shutdown()
print(json.dumps({
    "requests": len(created),
    "queue_dropped": batch.dropped_spans,
    "exporter_dropped": exporter.dropped_spans,
    "peak_rss_mb": peak_rss_bytes() / (1 << 20),
}))
"""


def _run(
    tmp_path: Path, mode: str, queue: int = 4096
) -> tuple[dict[str, Any], duckdb.DuckDBPyConnection]:
    script = tmp_path / "load_child.py"
    script.write_text(CHILD)
    out = tmp_path / "data"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            mode,
            str(out),
            str(THREADS),
            str(SPANS_PER_THREAD),
            str(ASYNC_REQUESTS),
            str(ATTEMPTS),
            str(queue),
            str(Path(__file__).resolve().parents[2]),  # the checkout, for bench.rss
        ],
        capture_output=True,
        text=True,
        timeout=1_200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    con = duckdb.connect()
    glob = str(out / "**" / "*.parquet").replace("'", "''")
    con.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet('{glob}', union_by_name = true)")
    return result, con


def _reconcile(result: dict[str, Any], con: duckdb.DuckDBPyConnection) -> None:
    requests = result["requests"]
    expected = requests * (ATTEMPTS + 1)
    (written,) = con.execute(
        "SELECT count(*) FROM spans WHERE span_role IS DISTINCT FROM 'telemetry_gap'"
    ).fetchone()
    (gap_total,) = con.execute(
        "SELECT coalesce(sum(gap_dropped_spans), 0) FROM spans WHERE span_role = 'telemetry_gap'"
    ).fetchone()
    reported = result["queue_dropped"] + result["exporter_dropped"]
    assert gap_total == reported  # every drop the pipeline counted is in the data set
    assert written + reported == expected  # exact: nothing lost without being counted
    # per request: attempt ordinals are distinct and within 1..ATTEMPTS, and what is
    # missing of each request is exactly what was dropped
    (bad,) = con.execute(
        "SELECT count(*) FROM (SELECT logical_request_id, list(attempt_ordinal) AS o "
        "FROM spans WHERE span_role = 'attempt' GROUP BY ALL) "
        "WHERE len(o) <> len(list_distinct(o)) OR list_min(o) < 1 OR list_max(o) > ?",
        [ATTEMPTS],
    ).fetchone()
    assert bad == 0
    (ids,) = con.execute(
        "SELECT count(DISTINCT logical_request_id) FROM spans WHERE logical_request_id IS NOT NULL"
    ).fetchone()
    assert ids <= requests
    (missing,) = con.execute(
        "SELECT ? * ? - count(*) FROM spans WHERE span_role IN ('attempt', 'logical_request')",
        [requests, ATTEMPTS + 1],
    ).fetchone()
    assert missing == reported
    if reported == 0:
        (complete,) = con.execute(
            "SELECT count(*) FROM (SELECT logical_request_id, list(attempt_ordinal ORDER BY "
            "start_time) AS o FROM spans WHERE span_role = 'attempt' GROUP BY ALL) "
            "WHERE o = range(1, ? + 1)",
            [ATTEMPTS],
        ).fetchone()
        assert complete == requests  # every request: ordinals 1..n in dispatch order
    assert result["peak_rss_mb"] < RSS_CEILING_MB, result


def test_threads_into_parquet_reconcile_exactly(tmp_path: Path) -> None:
    result, con = _run(tmp_path, "threads")
    assert result["requests"] == THREADS * (SPANS_PER_THREAD // (ATTEMPTS + 1))
    _reconcile(result, con)


def test_asyncio_concurrent_requests_reconcile_exactly(tmp_path: Path) -> None:
    result, con = _run(tmp_path, "asyncio")
    assert result["requests"] == ASYNC_REQUESTS
    _reconcile(result, con)


def test_overflowing_queue_loses_only_what_it_counts(tmp_path: Path) -> None:
    """A queue far too small for 8 threads: spans are dropped, and every one is counted."""
    result, con = _run(tmp_path, "threads", queue=32)
    assert result["queue_dropped"] > 0
    _reconcile(result, con)
