"""Spans no correct writer produces — end before start, ids of the wrong length, ordinals out
of dispatch order — are flagged by the `telemetry_anomaly` finding, never a crash."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import retryscope
from retryscope.analytics import build_report, connect, findings
from retryscope.cli import main
from retryscope.demo._scenarios import VirtualClock
from retryscope.instrumentation.export._columns import SpanColumns
from tests.reliability.support import audit

T0 = 1_800_000_000_000_000_000
MS = 1_000_000


def _foreign_file(path: Path, request_id: str) -> None:
    """Rows as a buggy foreign writer would leave them (the shared row builder, bad values)."""
    cols = SpanColumns()
    for trace_id, span_id, parent in (
        ("abc", "0123456789abcdef", None),  # trace id too short
        ("0123456789abcdef0123456789abcdef", "0123456789abcdef0123", None),  # span id too long
        ("0123456789abcdef0123456789abcdef", "0123456789ABCDEF", None),  # not lowercase hex
        ("0123456789abcdef0123456789abcdef", "1111111111111111", "22"),  # bad parent id
    ):
        cols.append(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name="foreign",
            kind="CLIENT",
            start_ns=T0,
            end_ns=T0 + MS,
            status_code="UNSET",
            status_message=None,
            attributes={
                "retryscope.logical_request.id": request_id,
                "retryscope.span.role": "attempt",
                "retryscope.attempt.layer": "sdk",
                "retryscope.attempt.ordinal": 1,
            },
            resource=None,
            scope_name="foreign",
            scope_version=None,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(cols.to_table(), path)


def test_anomalies_are_findings_and_everything_still_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    clock = VirtualClock(T0)
    with audit(data) as a:
        tracer = a.provider.get_tracer("anomalies")
        with retryscope.logical_request(
            operation="chat", tenant="acme", tracer_provider=a.provider, clock=clock
        ) as skewed:
            clock.advance_ms(1_000)
            with skewed.attempt("primary") as first:
                first.set_outcome("retryable", "unavailable")
            clock.now = T0 + 500 * MS  # another host's clock runs behind
            with skewed.attempt("primary"):
                pass
            clock.advance_ms(2_000)
        span = tracer.start_span("backwards", start_time=time.time_ns())
        span.end(end_time=span.start_time - 5 * MS)  # type: ignore[operator]
        a.close()
    _foreign_file(data / "foreign" / "spans-foreign.parquet", skewed.id)

    con, dataset = connect(data)
    assert dataset.skipped == ()
    report = build_report(con)  # answers
    assert report["logical_requests"] >= 1
    rows = findings(con, rule="telemetry_anomaly").to_pylist()
    problems = sorted(json.loads(r["evidence"])["problem"] for r in rows)
    assert problems == [
        "bad_parent_span_id",
        "bad_span_id",
        "bad_span_id",
        "bad_trace_id",
        "end_before_start",
        "ordinals_out_of_order",
    ]
    (order,) = [r for r in rows if "ordinals_out_of_order" in r["evidence"]]
    assert order["logical_request_id"] == skewed.id
    assert json.loads(order["evidence"])["previous_ordinal"] == 2
    assert all(r["severity"] == "warning" for r in rows)

    assert main(["findings", str(data), "--rule", "telemetry_anomaly", "--format", "json"]) == 0
    assert main(["request", str(data), skewed.id]) == 0
    assert main(["report", str(data)]) == 0
    capsys.readouterr()


def test_clean_pipeline_data_has_no_anomaly(tmp_path: Path) -> None:
    clock = VirtualClock(T0)
    with audit(tmp_path) as a:
        for _ in range(3):
            with retryscope.logical_request(
                operation="chat", tracer_provider=a.provider, clock=clock
            ) as req:
                for _ in range(3):
                    with req.attempt("primary", layer="harness"), req.attempt("p", layer="sdk"):
                        clock.advance_ms(10)
                    clock.advance_ms(5)
        a.close()
    con, _ = connect(tmp_path)
    assert findings(con, rule="telemetry_anomaly").num_rows == 0
