"""Helpers shared by the export and ingest tests: real spans and their OTLP encodings."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import retryscope
from retryscope.instrumentation import AttemptStampingProcessor


class Collect(SpanExporter):
    """Keeps finished spans in memory (a test sink, not a component under test)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def make_spans(requests: int = 3) -> list[ReadableSpan]:
    """Real SDK spans: logical requests with attempts and child spans carrying every
    attribute type, events and links."""
    sink = Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "deploy": 3}))
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(sink))
    tracer = provider.get_tracer("tests.export", "1.2")
    for i in range(requests):
        with (
            retryscope.logical_request(
                operation="chat",
                tenant="acme",
                idempotency_key=f"k-{i}",
                request={"i": i},
                retry_owner="harness",
                tracer_provider=provider,
            ) as req,
            req.attempt(route="primary", layer="harness") as attempt,
        ):
            attempt.set_outcome("success")
            with tracer.start_as_current_span(
                "http POST",
                kind=SpanKind.CLIENT,
                attributes={
                    "http.response.status_code": 200,
                    "http.request.method": "POST",
                    "ratio": 0.5,
                    "flag": True,
                    "tags": ("a", "b"),
                    "nums": (1, 2, 3),
                    "gen_ai.usage.input_tokens": "many",  # wrong type: kept in the map
                },
                links=[Link(attempt.span.get_span_context(), {"why": "test"})],
            ) as span:
                span.add_event("sent", {"bytes": 12})
                span.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    return sink.spans


def otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    return bytes(encode_spans(spans).SerializeToString())


def otlp_json_doc(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP/JSON document the Collector writes for ``spans`` (hex ids, int64 strings)."""
    doc = MessageToDict(encode_spans(spans))
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    link["traceId"] = base64.b64decode(link["traceId"]).hex()
                    link["spanId"] = base64.b64decode(link["spanId"]).hex()
    return doc


def otlp_json_line(spans: Sequence[ReadableSpan]) -> str:
    return json.dumps(otlp_json_doc(spans), separators=(",", ":"))


def read_rows(directory: Path) -> pa.Table:
    """All visible Parquet rows under ``directory``, sorted by span id (schema columns only)."""
    files = sorted(p for p in directory.rglob("*.parquet") if not p.name.startswith("."))
    tables = [pq.read_table(f, partitioning=None) for f in files]
    table = pa.concat_tables(tables) if tables else pa.table({})
    return table.sort_by([("trace_id", "ascending"), ("span_id", "ascending")])


def run_ok(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
) -> str:
    """Run a subprocess that must succeed; its stdout."""
    done = subprocess.run(
        list(args), env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def last_json_line(stdout: str) -> dict[str, Any]:
    """The JSON object a script printed last."""
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def error_lines(logger: str = "retryscope") -> list[str]:
    """A list that collects the messages ``logger`` logs at ERROR or above from now on (for
    scripts run in a subprocess that report what they logged)."""
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                lines.append(record.getMessage())

    logging.getLogger(logger).addHandler(_Collect())
    return lines
