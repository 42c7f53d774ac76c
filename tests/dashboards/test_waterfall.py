"""A request as engineers read traces: one waterfall of its spans (attempts, what ran
beneath them and its trace's spans of no request) with durations, backoff gaps,
Retry-After, not_before, the deadline and the critical path, every value in the tooltips
literal; two requests side by side on one time axis (``?id=A&vs=B``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from streamlit.testing.v1 import AppTest

from retryscope.dashboards.views import request as page
from tests.dashboards.conftest import charts, follow, rendered, start_app
from tests.dashboards.test_hostile import EVIL, _assert_safe, _texts
from tests.recorder import T0, Clock, Recorder
from tests.ui_fixture import HOSTILE_ROUTE

TIP = dict((title, column) for column, title in page.WATERFALL_TOOLTIP)
"""A tooltip field → its column in the chart's data."""


def _layers(at: AppTest, index: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The ``index``-th chart's layers by role: bars, labels, gaps, waits, ticks, the
    deadline and its label, the fallback and late-success marks (``<role>_spec``: the
    layer's spec, for those whose drawing a test checks)."""
    spec, data = charts(at)[index]
    out: dict[str, list[dict[str, Any]]] = {}
    for layer in spec["layer"]:
        rows = data[layer["data"]["name"]].to_pylist()
        mark, encoding = layer["mark"], layer["encoding"]
        if mark["type"] == "bar":
            role = "bar"
        elif mark["type"] == "text" and mark.get("text") == "fallback":
            role = "fallback"
        elif mark["type"] == "text" and encoding["x"]["field"] == "deadline_ms":
            role = "deadline_label"
        elif mark["type"] == "text":
            role = "label"
        elif mark["type"] == "rule" and "x2" in encoding:
            role = {"backoff gap": "gap", "Retry-After asked for": "wait"}[
                encoding["tooltip"][0]["title"]
            ]
        elif mark["type"] == "rule":
            role = "deadline"
        elif mark["type"] == "point":
            role = "late"
        else:
            role = mark["type"]  # tick
        out[role] = rows
        out[f"{role}_spec"] = [layer]
    return out


def _by_row(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["row"].lstrip("│ ▾▸·"): r for r in rows}


def test_one_row_per_span_with_its_duration_gaps_and_not_before(app: AppTest) -> None:
    follow(app, "request", {"id": "nested"})
    w = _layers(app)
    bars = _by_row(w["bar"])
    assert len(bars) == 13
    assert [r["label"] for r in w["label"]][:3] == ["290 ms", "30 ms", "10 ms"]
    assert bars["harness #2 · attempt primary"]["label"] == "30 ms"
    # the backoff before an attempt on its row, ending where its bar starts
    gaps = sorted((g["row"].lstrip("│ ▾"), g["from_ms"], g["to_ms"]) for g in w["gap"])
    assert gaps == [
        ("harness #2 · attempt primary", 30.0, 130.0),
        ("harness #3 · attempt primary", 160.0, 260.0),
    ]
    for g in w["gap"]:  # a label sits after its bar: the line never strikes it
        assert g["to_ms"] <= _by_row(w["bar"])[g["row"].lstrip("│ ▾")]["start_ms"]
    ticks = sorted((t["row"].lstrip("│ ▾"), t["not_before_ms"]) for t in w["tick"])
    assert ticks == [
        ("harness #2 · attempt primary", 130.0),
        ("harness #3 · attempt primary", 260.0),
    ]
    assert "deadline" not in w  # 5 s after the start: beyond the spans (a caption says)
    assert "wait" not in w


def test_the_backoff_line_never_strikes_an_ordinal_or_a_label(app: AppTest) -> None:
    follow(app, "request", {"id": "nested"})
    w = _layers(app)
    bars = _by_row(w["bar"])
    # the ordinals are in the row names, beside the plot; a duration after its bar
    label = w["label_spec"][0]
    assert (label["encoding"]["x"]["field"], label["mark"]["align"]) == ("end_ms", "left")
    assert label["mark"]["dx"] > 0
    # a gap ends where its attempt's bar starts: it crosses neither a bar nor a label
    assert w["gap"]
    for g in w["gap"]:
        assert g["to_ms"] <= bars[g["row"].lstrip("│ ▾")]["start_ms"]


def test_the_critical_path_is_outlined_with_its_total_and_shares(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    w = _layers(app)
    bars = _by_row(w["bar"])
    path = {row: b["critical_ms"] for row, b in bars.items()}
    assert path == {
        "logical_request chat": 350.0,  # between the attempts
        "harness #1 · attempt primary": 0.0,
        "transport #1 · attempt primary": 600.0,
        "harness #2 · attempt primary": 0.0,
        "transport #2 · attempt primary": 0.0,
        "chat gpt-test": 400.0,  # what the request waited on last
    }
    width = w["bar_spec"][0]["encoding"]["strokeWidth"]
    assert {"test": "datum.critical_ms != null", "value": 2.5} in width["condition"]
    assert width["value"] == 0
    assert w["deadline"] == [{"deadline_ms": 1000.0, "label": "deadline"}]
    assert any(m.value.startswith("**Critical path: 1,350 ms**, 6 span(s)") for m in app.markdown)
    shares = app.table[1].value
    assert dict(zip(shares.index, shares["Share"], strict=True))["chat gpt\\-test"] == "29.6%"
    tooltip = bars["chat gpt-test"][TIP["Critical path"]]
    assert tooltip == "400 ms of it (29.6%)"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ra``: attempt 1 rate limited (50 ms); 200 ms later attempt 2, which records the
    150 ms Retry-After the answer asked for, calls a process that carried only the W3C
    trace context (a span of no request, 30 ms) and succeeds."""
    rec = Recorder(tmp_path_factory.mktemp("traced") / "spans")
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="ra", tenant="acme") as req:
        rec.attempt(req, outcome="rate_limited", ms=50, gap_ms=200)
        with req.attempt("primary", layer="harness") as second:
            second.set_backoff(delay_ms=200, retry_after_ms=150)
            remote = trace.NonRecordingSpan(second.span.get_span_context())
            span = rec.tracer.start_span(
                "GET /v1/answer",
                context=trace.set_span_in_context(remote, otel_context.Context()),
                kind=trace.SpanKind.SERVER,
                start_time=clock(),
            )
            clock.advance_ms(30)
            span.end(end_time=clock())
            clock.advance_ms(10)
            second.set_outcome("success")
    rec.connect()
    return rec.directory


def test_retry_after_and_the_trace_spans_of_no_request(
    traced: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = start_app(traced, monkeypatch)
    follow(at, "request", {"id": "ra"})
    w = _layers(at)
    rows = [r["row"] for r in w["bar"]]
    assert rows == [
        "▾ logical_request chat",
        "│ · harness #1 · attempt primary",
        "│ ▾ harness #2 · attempt primary",
        "│ │ · GET /v1/answer",  # the downstream process: no logical request, same trace
    ]
    downstream = w["bar"][3]
    assert (downstream["start_ms"], downstream["end_ms"], downstream["critical_ms"]) == (
        250.0,
        280.0,
        30.0,
    )
    # the Retry-After from the end of the answer that asked for it; the backoff as waited
    assert [(g["from_ms"], g["to_ms"], g["gap_text"]) for g in w["wait"]] == [
        (50.0, 200.0, "150 ms")
    ]
    assert [(g["from_ms"], g["to_ms"]) for g in w["gap"]] == [(50.0, 250.0)]
    second = w["bar"][2]
    assert second[TIP["Retry-After"]] == "150 ms"
    assert second[TIP["Backoff before it"]] == "200 ms"


def test_tooltips_show_the_recorded_values_literally(app: AppTest) -> None:
    follow(app, "request", {"id": "widening"})
    spec, _ = charts(app)[0]
    bar = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "bar")
    assert [t["title"] for t in bar["encoding"]["tooltip"]] == [
        f for _, f in page.WATERFALL_TOOLTIP
    ]
    w = _layers(app)
    routes = {b[TIP["Route"]] for b in w["bar"]}
    assert HOSTILE_ROUTE in routes  # as recorded: a tooltip shows text, never markdown
    assert all(
        len(b[c]) <= page.TOOLTIP_MAX_CHARS + 30
        for b in w["bar"]
        for c, _ in page.WATERFALL_TOOLTIP
    )
    assert all(b[c] is not None for b in w["bar"] for c, _ in page.WATERFALL_TOOLTIP)


def _side_by_side(at: AppTest) -> dict[str, dict[str, str]]:
    figures = at.dataframe[0].value
    return {column: dict(figures[column]) for column in figures.columns}


def test_two_requests_side_by_side_on_one_time_axis(app: AppTest) -> None:
    follow(app, "request", {"id": "nested", "vs": "deadline"})
    assert app.query_params["id"] == "nested"
    assert app.query_params["vs"] == "deadline"
    figures = _side_by_side(app)
    assert list(figures) == ["A: nested", "B: deadline"]
    a, b = figures["A: nested"], figures["B: deadline"]
    assert (a["Terminal"], b["Terminal"]) == ("complete", "stop_deadline")
    assert (a["Receiver attempts"], b["Receiver attempts"]) == ("9", "2")
    assert (a["Retry amplification"], b["Retry amplification"]) == ("9.00×", "2.00×")
    assert (a["Retried layers"], b["Retried layers"]) == (
        "harness × transport",
        "harness",
    )
    assert (a["Cost"], b["Cost"]) == ("–", "$0.0035")
    assert a["Deadline"] == "5,000 ms after the start"
    assert b["Deadline"] == "1,000 ms after the start, ended 350 ms after it"
    assert (a["Critical path"], b["Critical path"]) == (
        "290 ms over 13 span(s)",
        "1,350 ms over 6 span(s)",
    )
    (first, _), (second, _) = charts(app)
    # one time axis from each request's start, the same room for row names
    x = [
        next(layer for layer in c["layer"] if layer["mark"]["type"] == "bar")["encoding"]
        for c in (first, second)
    ]
    assert x[0]["x"]["scale"] == x[1]["x"]["scale"]
    assert x[0]["x"]["scale"]["domain"][0] == 0
    assert x[0]["y"]["axis"]["labelPadding"] == x[1]["y"]["axis"]["labelPadding"]
    assert not app.metric  # the comparison alone
    next(b for b in app.button if b.label == "Show A alone").click().run()
    assert "vs" not in app.query_params
    assert app.metric


def test_a_hostile_id_to_compare_with_is_named_not_rendered(app: AppTest) -> None:
    hostile = f"x` [Re-authenticate here]({EVIL}) `"
    follow(app, "request", {"id": "nested", "vs": hostile})
    (warning,) = [w.value for w in app.warning]
    assert rendered(warning).startswith(
        f"No logical request, trace or idempotency digest matches {hostile}"
    )
    _assert_safe(_texts(app.main))
    assert app.metric  # the request alone
    follow(app, "request", {"id": "nested", "vs": "z" * 5_000})
    assert any("longer than 1,000 characters" in rendered(w.value) for w in app.warning)


def test_the_waterfall_sends_only_what_it_draws(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    _, data = charts(app)[0]
    bars = next(t for t in data.values() if "row" in t.column_names and "label" in t.column_names)
    assert "events" not in bars.column_names  # the exception's text stays on the server
    assert "status_message" not in bars.column_names
