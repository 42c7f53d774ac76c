"""A fork pool opened inside an attempt numbers its sends with the parent: distinct calls
made by different children are distinct operations, never resends of one another.

The parent runs in its own interpreter (tests/forking.py): it sends through httpx
(opentelemetry-instrumentation-httpx) to a server on 127.0.0.1 before, inside (a
fork-based ``multiprocessing.Pool(4)``, eight calls) and after the pool, and the report
is read from the Parquet files every process wrote.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.forking import run_parent

PARENT = r"""
import json, multiprocessing, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
import retryscope
from retryscope.analytics import amplification, connect, findings
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter

hits = {}

class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        hits[self.path] = hits.get(self.path, 0) + 1
        # the first "/item/3" fails: its repeat is a resend (a repeat after a success is a
        # deliberate second call)
        self.send_response(503 if self.path == "/item/3" and hits[self.path] == 1 else 200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
threading.Thread(target=server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{server.server_port}"
out = sys.argv[1]
exporter = ParquetSpanExporter(out, partitioning="none")
provider = TracerProvider(resource=Resource.create({"service.name": "pool"}))
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
HTTPXClientInstrumentor().instrument(tracer_provider=provider)

def call(path):
    httpx.get(base + path)
    if path == "/item/3":
        httpx.get(base + path)  # after its 503, the same request again in the same child
    exporter.force_flush()
    return multiprocessing.current_process().pid

paths = ["/warmup"] + [f"/item/{i}" for i in range(1, 8)]
with retryscope.logical_request(operation="index", tracer_provider=provider,
                                logical_request_id="pool") as req:
    with req.attempt("primary"):
        httpx.get(base + "/warmup")
        with multiprocessing.get_context("fork").Pool(4) as pool:
            children = set(pool.map(call, paths, chunksize=1))
        httpx.get(base + "/after")
provider.force_flush()
exporter.force_flush()
provider.shutdown()
con, _ = connect(out)
rows = con.sql(
    "SELECT attempt_ordinal, operation_ordinal, coalesce(http_resend_count, 0) "
    "FROM spans WHERE span_role = 'attempt' AND layer = 'transport'").fetchall()
print(json.dumps({
    "children": len(children),
    "sends": rows,
    "amplification": amplification(con).to_pylist()[0],
    "findings": findings(con).column("rule_id").to_pylist(),
}))
"""


def test_fork_pool_children_number_distinct_calls_as_distinct_operations(
    tmp_path: Path,
) -> None:
    result = run_parent(PARENT, tmp_path, str(tmp_path / "spans"), timeout=120)
    assert result["children"] > 1  # the calls really ran in several children
    ordinals = [row[0] for row in result["sends"]]
    assert sorted(ordinals) == list(range(1, 12))  # 11 sends, each its own ordinal
    operations = Counter(row[1] for row in result["sends"])
    # 10 distinct calls: the parent's 2, the pool's 8 ("/warmup" again, in a child, is
    # another process's call); only "/item/3" was sent twice, by one child
    assert sorted(operations) == list(range(1, 11))
    assert sorted(operations.values()) == [1] * 9 + [2]
    assert sorted(row[2] for row in result["sends"]) == [0] * 10 + [1]
    figures = result["amplification"]
    assert (figures["operations"], figures["receiver_attempts"]) == (10, 11)
    assert figures["amplification_ratio"] == 1.1
    assert "retry_budget_exceeded" not in result["findings"]


REUSED = r"""
import json, multiprocessing, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
import retryscope
from retryscope.analytics import connect
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter

out = sys.argv[1]
exporter = ParquetSpanExporter(out, partitioning="none")
provider = TracerProvider()
provider.add_span_processor(AttemptStampingProcessor())
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("worker")

def task(name):
    tracer.start_span(name).end()
    exporter.force_flush()

with retryscope.logical_request(operation="first", tracer_provider=provider,
                                logical_request_id="first") as req:
    with req.attempt("primary"):
        pool = multiprocessing.get_context("fork").Pool(2)  # kept for later requests
        pool.map(task, ["during first"] * 2)
with retryscope.logical_request(operation="second", tracer_provider=provider,
                                logical_request_id="second"):
    pool.map(task, ["after first"] * 2)  # a worker still runs in the first's context
pool.close()
pool.join()
exporter.force_flush()
provider.shutdown()
con, _ = connect(out)
rows = con.sql("SELECT name, logical_request_id FROM spans "
               "WHERE name IN ('during first', 'after first')")
print(json.dumps(sorted(rows.fetchall())))
"""


def test_a_pool_worker_forked_inside_a_request_stamps_nothing_of_it_once_it_ended(
    tmp_path: Path,
) -> None:
    spans = run_parent(REUSED, tmp_path, str(tmp_path / "spans"), timeout=120)
    assert spans == [["after first", None]] * 2 + [["during first", "first"]] * 2
