"""Implicit logical requests (``analytics/sql/model/implicit_requests.sql``): spans recorded
without ``retryscope.logical_request(...)`` are audited by the outermost logical operation
above their sends, through a real TracerProvider, the Parquet exporter and the report."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

import retryscope
from retryscope.analytics import build_report, findings, request_detail
from retryscope.analytics.model import _build
from retryscope.instrumentation import AttemptStampingProcessor
from tests.instrumentation.conftest import Audit, make_audit

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[Audit]:
    a = make_audit(tmp_path / "spans", AttemptStampingProcessor())
    yield a
    a.provider.shutdown()


def _tracer(audit: Audit) -> Tracer:
    return audit.provider.get_tracer("app")


def _send(tracer: Tracer, status: int, *, copies: int = 2, **attributes: Any) -> None:
    """One HTTP send, seen by ``copies`` nested HTTP client instrumentations."""
    if copies == 0:
        return
    attrs = {"http.request.method": "POST", "url.full": "http://127.0.0.1/v1/chat", **attributes}
    with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT, attributes=attrs) as span:
        _send(tracer, status, copies=copies - 1, **attributes)
        span.set_attribute("http.response.status_code", status)


def _chat(tracer: Tracer, statuses: tuple[int, ...] = (503, 503, 200)) -> None:
    """A GenAI call span whose SDK tried once per status."""
    with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT, attributes=CHAT):
        for status in statuses:
            _send(tracer, status)


def _report(audit: Audit) -> dict[str, Any]:
    return build_report(audit.connect())


def _figures(report: dict[str, Any]) -> tuple[int, int, int, int, float, int]:
    amp = report["amplification"]
    return (
        report["logical_requests"],
        report["implicit_requests"],
        report["receiver_attempts"],
        report["operations"],
        report["amplification_ratio"],
        amp["hidden_attempts"],
    )


def test_genai_calls_are_the_requests_and_each_send_counts_once(audit: Audit) -> None:
    tracer = _tracer(audit)
    for _ in range(5):
        _chat(tracer)
    report = _report(audit)
    assert _figures(report) == (5, 5, 15, 5, 3.0, 10)
    assert report["physical_attempts"] == 20  # the 5 calls and their 15 sends
    assert report["terminals"] == {"complete": 5}
    assert report["violations"]["missing_terminal"] == 0


def test_a_failed_call_has_no_terminal(audit: Audit) -> None:
    _chat(_tracer(audit), (503, 503, 503))
    report = _report(audit)
    assert report["terminals"] == {"unknown": 1}
    assert report["receiver_attempts"] == 3


def test_drill_down_and_findings_agree_with_the_report(audit: Audit) -> None:
    tracer = _tracer(audit)
    _chat(tracer)
    model = audit.connect()
    ((trace_id,),) = model.execute("SELECT DISTINCT trace_id FROM spans").fetchall()
    ((span_id,),) = model.execute(
        "SELECT span_id FROM spans WHERE parent_span_id IS NULL"
    ).fetchall()
    ident = f"implicit:{trace_id}:{span_id}"
    for key in (ident, trace_id):
        summary, attempts = request_detail(model, key)
        (row,) = summary.to_pylist()
        assert row["logical_request_id"] == ident
        assert (row["receiver_attempts"], row["operations"], row["amplification_ratio"]) == (
            3,
            1,
            3.0,
        )
        assert row["retried_layers"] == ["sdk"]
        assert attempts.column("layer").to_pylist() == [
            "sdk",
            "transport",
            "transport",
            "transport",
        ]
        assert attempts.column("outcome").to_pylist() == [
            "success",
            "retryable",
            "retryable",
            "success",
        ]
    listed = findings(model).to_pylist()
    assert {f["logical_request_id"] for f in listed if f["logical_request_id"]} <= {ident}


def test_an_explicit_request_wins_and_each_send_counts_once(audit: Audit) -> None:
    """A SERVER span handles both an explicit logical request and a call made outside it:
    the explicit request keeps its sends, the SERVER span's handling is an implicit request
    of the other call's sends only."""
    tracer = _tracer(audit)
    with tracer.start_as_current_span("GET /chat", kind=SpanKind.SERVER):
        with retryscope.logical_request(operation="chat") as req:
            with req.attempt(route="primary", layer="harness") as attempt:
                _send(tracer, 200)
                attempt.set_outcome("success")
            req.set_terminal("complete")
        _chat(tracer, (503, 200))
    report = _report(audit)
    assert _figures(report)[:4] == (2, 1, 3, 2)  # 1 explicit send + 2 implicit sends


def test_a_server_span_is_the_request_of_the_calls_beneath_it(audit: Audit) -> None:
    tracer = _tracer(audit)
    with tracer.start_as_current_span("POST /answer", kind=SpanKind.SERVER):
        _chat(tracer, (503, 200))
        _chat(tracer, (200,))
    assert _figures(_report(audit)) == (1, 1, 3, 2, 1.5, 1)


def test_a_root_that_is_no_logical_operation_leaves_each_call_a_request(audit: Audit) -> None:
    tracer = _tracer(audit)
    with tracer.start_as_current_span("main"):
        _chat(tracer, (503, 200))
        _chat(tracer, (200,))
    assert _figures(_report(audit)) == (2, 2, 3, 2, 1.5, 1)


def test_sends_without_a_call_are_operations_unless_the_client_says_resend(
    audit: Audit,
) -> None:
    tracer = _tracer(audit)
    with tracer.start_as_current_span("main"):
        _send(tracer, 503, copies=1)
        _send(tracer, 200, copies=1, **{"http.request.resend_count": 1})
        _send(tracer, 200, copies=1)
    # the root is the request: 3 sends, 2 operations (the second send repeats the first)
    report = _report(audit)
    assert _figures(report)[:5] == (1, 1, 3, 2, 1.5)
    assert report["amplification"]["hidden_attempts"] == 1  # the resend, below the root's try


def test_a_lone_send_is_its_own_request(audit: Audit) -> None:
    _send(_tracer(audit), 200, copies=2)
    assert _figures(_report(audit)) == (1, 1, 1, 1, 1.0, 0)


def test_spans_without_a_send_make_no_request(audit: Audit) -> None:
    tracer = _tracer(audit)
    with tracer.start_as_current_span("GET /health", kind=SpanKind.SERVER):
        with tracer.start_as_current_span("work"):
            pass
    report = _report(audit)
    assert report["logical_requests"] == 0
    assert report["implicit_requests"] == 0
    assert report["empty_reason"]


def _straddling_call(tracer: Tracer, hour_ns: int) -> None:
    """A SERVER span handling one GenAI call whose SDK tried three times, running across
    the hour that starts at ``hour_ns``: the handler, the call and its first send start
    before it (one time partition), the two later sends after it (the next)."""
    ms = 1_000_000
    server = tracer.start_span("POST /chat", kind=SpanKind.SERVER, start_time=hour_ns - 300 * ms)
    with trace.use_span(server, end_on_exit=False):
        call = tracer.start_span(
            "chat m", kind=SpanKind.CLIENT, attributes=CHAT, start_time=hour_ns - 250 * ms
        )
        with trace.use_span(call, end_on_exit=False):
            for start, status in ((-200, 503), (100, 503), (400, 200)):
                send = tracer.start_span(
                    "POST",
                    kind=SpanKind.CLIENT,
                    attributes={"http.request.method": "POST", "http.response.status_code": status},
                    start_time=hour_ns + start * ms,
                )
                send.end(end_time=hour_ns + (start + 50) * ms)
        call.end(end_time=hour_ns + 500 * ms)
    server.end(end_time=hour_ns + 600 * ms)


def test_an_implicit_request_across_an_hour_counts_once_in_a_model_cache(
    audit: Audit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spans of one implicit request land in two time partitions, each built apart in
    a model cache (each hour a unit of its own, however few its rows): the trace's spans
    of no logical request are built together again, so it is one request with all its
    sends, as in the model built in one pass."""
    monkeypatch.setattr(_build, "CACHE_SPAN_ROWS", 0)
    hour = 1_790_002_800 * 10**9  # 2026-09-21T15:00Z
    _straddling_call(_tracer(audit), hour)
    whole = _report(audit)
    assert len({p.parent for p in audit.directory.rglob("*.parquet")}) == 2
    assert _figures(whole) == (1, 1, 3, 1, 3.0, 2)
    for run in range(2):  # built, then read from the cache
        con, _ = retryscope.analytics.connect(audit.directory, model_cache=tmp_path / "cache")
        assert build_report(con) == whole
        # the request as each partition saw it (the handler's; each later send its own)
        assert (run, con.stats["straddlers"]) == (run, 3)
    # the hours arriving one at a time: the later one's update joins them
    first, second = sorted({p.parent for p in audit.directory.rglob("*.parquet")})
    for hour in (first, second):
        shutil.copytree(hour, tmp_path / "growing" / hour.relative_to(audit.directory))
        con, _ = retryscope.analytics.connect(tmp_path / "growing", model_cache=tmp_path / "c2")
        report = build_report(con)
    assert report == whole
    # a model in memory built in one pass per hour
    monkeypatch.setattr(_build, "BUILD_SPAN_ROWS", 1)
    con, _ = retryscope.analytics.connect(audit.directory)
    assert build_report(con) == whole
    assert con.stats["straddlers"] == 3
