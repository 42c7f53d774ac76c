"""The report names the rows it could not join to their logical request, and why.

A row stamped by retryscope without its logical request id (its span attribute count
limit evicted the id; a foreign or broken writer wrote none) joins no request, and an
attempt whose request span never reached the data set joins a request built from its
attempts alone. ``unjoined_rows`` counts each, by reason, over the whole data set
(``analytics/sql/metrics/unjoined_rows.sql`` over ``unjoined_spans``,
``model_checks.sql``); the ``unjoined_span`` finding points at the rows without an id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from retryscope.analytics import build_report, connect, findings
from retryscope.analytics._report import format_text
from retryscope.instrumentation.export._columns import SpanColumns
from tests.reliability.support import run_script

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
TRACE = "0123456789abcdef0123456789abcdef"

_RECORD = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from retryscope.instrumentation import (
    AttemptStampingProcessor, ParquetSpanExporter, logical_request,
)

exporter = ParquetSpanExporter(sys.argv[1])
provider = TracerProvider()
processor = AttemptStampingProcessor()
provider.add_span_processor(processor)
provider.add_span_processor(SimpleSpanProcessor(exporter))
http = provider.get_tracer("opentelemetry.instrumentation.httpx")
held = []
for i in range(4):
    req = logical_request(
        operation="chat", tenant="acme", idempotency_key=f"k{i}", tracer_provider=provider,
        attributes={f"app.r{j}": j for j in range(12)},
    ).__enter__()
    for route in ("primary", "secondary"):
        with req.attempt(route) as attempt:
            attempt.set_attributes({f"app.a{j}": j for j in range(12)})
            send = http.start_span(
                "POST", kind=SpanKind.CLIENT, attributes={"http.request.method": "POST"}
            )
            # the instrumentation's response attributes: 8 evict every stamp of the send
            headers = 8 if i == 3 else 1
            send.set_attributes({f"http.response.header.x{j}": "1" for j in range(headers)})
            send.end()
    if i < 3:
        req.__exit__(None, None, None)
    else:
        held.append(req)  # never exited: its span is never exported
exporter.force_flush()
print(processor.unjoined)
"""


def _record(directory: Path) -> int:
    """Four requests of two attempts and a send each, recorded in a process whose span
    attribute count limit is 8; the last request is never exited and its sends lose their
    id to the limit. The sends the recorder counted as unjoined."""
    out = run_script(_RECORD, str(directory), env={"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "8"})
    return int(out.split()[-1])


def test_real_spans_under_a_limit_of_8_are_joined_or_named(tmp_path: Path) -> None:
    data = tmp_path / "spans"
    assert _record(data) == 2  # the last request's two sends lost every stamp
    model, _ = connect(data)
    report = build_report(model)
    # the sends that lost every stamp are no row of any request (the recorder counted
    # them); the request never exited left its two attempts without their request span
    assert report["unjoined_rows"] == {
        "total": 2,
        "request_id_evicted": 0,
        "request_id_missing": 0,
        "request_span_missing": 2,
    }
    assert report["violations"]["missing_terminal"] == 1
    assert report["physical_attempts"] == 3 * 4 + 2  # a send without any stamp is no row
    assert "attempts whose request span is not in the data set" in format_text(report)


def _row(cols: SpanColumns, span_id: str, attributes: dict[str, object], dropped: int) -> None:
    cols.append(
        trace_id=TRACE,
        span_id=span_id,
        parent_span_id=None,
        name=f"foreign {span_id[-1]}",
        kind="CLIENT",
        start_ns=T0,
        end_ns=T0 + MS,
        status_code="UNSET",
        status_message=None,
        attributes=attributes,
        resource=None,
        scope_name="foreign",
        scope_version=None,
        dropped_attributes=dropped,
    )


def test_foreign_rows_without_a_request_id_are_counted_by_reason(tmp_path: Path) -> None:
    cols = SpanColumns()
    attempt = {"retryscope.span.role": "attempt", "retryscope.attempt.layer": "sdk"}
    _row(cols, "0000000000000001", {**attempt, "retryscope.attempt.ordinal": 1}, dropped=1)
    _row(cols, "0000000000000002", attempt, dropped=0)
    _row(cols, "0000000000000003", {"retryscope.operation": "chat"}, dropped=0)
    _row(cols, "0000000000000004", {"retryscope.route.id": "primary"}, dropped=0)
    _row(cols, "0000000000000005", {"retryscope.attempt.ordinal": 2}, dropped=0)
    # not counted: a span of no request carrying nothing of retryscope's (limit or not),
    # and the exporter's record of lost spans (of no request by design)
    _row(cols, "0000000000000006", {"http.request.method": "GET"}, dropped=5)
    _row(cols, "0000000000000007", {"retryscope.span.role": "telemetry_gap"}, dropped=0)
    # an attempt of a request whose span is not in the data set
    _row(cols, "0000000000000008", {**attempt, "retryscope.logical_request.id": "r1"}, dropped=0)
    (tmp_path / "data").mkdir()
    pq.write_table(cols.to_table(), tmp_path / "data" / "spans-foreign.parquet")

    model, dataset = connect(tmp_path / "data")
    assert dataset.skipped == ()
    report = build_report(model)
    assert report["unjoined_rows"] == {
        "total": 6,
        "request_id_evicted": 1,
        "request_id_missing": 4,
        "request_span_missing": 1,
    }
    assert report["violations"]["unjoined_span"] == 5
    rows = [r for r in findings(model).to_pylist() if r["rule_id"] == "unjoined_span"]
    evidence = {r["span_id"]: json.loads(r["evidence"])["reason"] for r in rows}
    assert evidence == {
        "0000000000000001": "request_id_evicted",
        **{f"000000000000000{i}": "request_id_missing" for i in range(2, 6)},
    }
    text = format_text(report)
    assert "request id evicted by the span attribute count limit" in text
    assert "retryscope rows written without a request id" in text
