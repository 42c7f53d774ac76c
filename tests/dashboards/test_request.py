"""Request drill-down: search by logical request id, trace id or idempotency digest; its
attempts in the waterfall (one colour per outcome kind, ordinals in the row names,
durations, backoff gaps, not_before marks, fallback, deadline and late-success markers,
tooltips); the span tree with its detail panel (GenAI model and tokens, redacted errors,
events) and collapsing; the request's findings; the compact attempts table; the trace
link."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics import connect, request_summary
from retryscope.dashboards.serve import APP, DATA_ENV, TRACE_URL_ENV
from retryscope.dashboards.views import request as page
from tests.dashboards.conftest import (
    charts,
    follow,
    metrics,
    open_page,
    rendered,
    select_chart,
    table,
    type_text,
)
from tests.dashboards.test_waterfall import TIP
from tests.dashboards.test_waterfall import _layers as waterfall
from tests.ui_fixture import BEHAVIOR_NAME, CAPABILITY_NAME, HOSTILE_ROUTE, LEAKY_ERROR

NESTED = {
    "Terminal": "complete",
    "Attempts": "12",
    "Receiver attempts": "9",
    "Retry amplification": "9.00×",  # 9 sends of one operation
    "Retry product": "9×",
    "Duration": "290 ms",
    "Cost": "–",
    "Findings": "1",
}


def _ids(ui_data: Path) -> dict[str, str]:
    con, _ = connect(ui_data)
    row = request_summary(con, "nested").to_pylist()[0]
    return {"trace": row["trace_id"], "digest": row["idempotency_digest"]}


def _attempts(w: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The waterfall's bars of attempts."""
    return [b for b in w["bar"] if b[TIP["Role"]] == "attempt"]


def _row(mark: dict[str, Any]) -> str:
    return str(mark["row"]).lstrip("│ ▾▸·")


def test_drill_down_from_a_link(app: AppTest) -> None:
    follow(app, "request", {"id": "nested"})
    assert app.text_input(key="request_search").value == "nested"
    assert metrics(app) == NESTED
    assert "harness × transport" in app.metric[4].delta
    assert app.metric[3].delta == "1 distinct operation"
    w = waterfall(app)
    attempts = _attempts(w)
    harness = sorted(
        (b["start_ms"], b["end_ms"], b["kind"])
        for b in attempts
        if b[TIP["Layer / attempt"]].startswith("harness")
    )
    assert harness == [
        (0.0, 30.0, "unavailable"),
        (130.0, 160.0, "unavailable"),
        (260.0, 290.0, "success"),
    ]
    sends = [b for b in attempts if b[TIP["Layer / attempt"]].startswith("transport")]
    assert [b[TIP["Route"]] for b in sends] == ["primary"] * 9
    # every attempt's ordinal in its row's name (beside the plot, never on a bar), its
    # duration just after its bar: 30 ms for the harness attempts, 10 ms for the sends
    ordinals = sorted(re.findall(r" (#\d+) · ", _row(b))[0] for b in attempts)
    assert ordinals == sorted(["#1", "#2", "#3"] * 2 + [f"#{n}" for n in range(4, 10)])
    assert sorted(b["label"] for b in attempts) == ["10 ms"] * 9 + ["30 ms"] * 3
    assert sorted((g["from_ms"], g["to_ms"], g["gap_text"]) for g in w["gap"]) == [
        (30.0, 130.0, "100 ms"),
        (160.0, 260.0, "100 ms"),
    ]
    assert sorted(t["not_before_ms"] for t in w["tick"]) == [130.0, 260.0]
    assert "deadline" not in w  # 5 s away: the axis spans the spans, a caption says
    assert any("deadline, 5,000 ms after the start" in c.value for c in app.caption)
    assert "late" not in w
    assert "fallback" not in w
    attempts_table = table(app, 1)
    assert len(attempts_table) == 12
    assert list(attempts_table["backoff_delay_ms"]).count("100 ms") == 2
    assert "acme" in app.markdown[0].value


def test_waterfall_colours_each_outcome_kind_and_marks_the_deadline(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    w = waterfall(app)
    kinds = sorted((b[TIP["Layer / attempt"]], b["kind"]) for b in _attempts(w))
    assert kinds == [
        ("harness #1", "unavailable"),
        ("harness #2", "success"),
        ("transport #1", "rate_limited"),
        ("transport #2", "success"),
    ]
    scale = w["bar_spec"][0]["encoding"]["color"]["scale"]
    colours = dict(zip(scale["domain"], scale["range"], strict=True))
    assert colours["rate_limited"] != colours["unavailable"]  # one colour per kind
    assert len(set(colours.values())) == len(colours)
    assert w["deadline"] == [{"deadline_ms": 1000.0, "label": "deadline"}]
    label = w["deadline_label_spec"][0]
    # the label sits above the plot, not over a bar
    assert (label["encoding"]["y"], label["mark"]["baseline"]) == ({"value": 0}, "bottom")
    # both the harness attempt and its send succeeded after the deadline
    assert sorted((_row(m), m["end_ms"], m["late_text"]) for m in w["late"]) == [
        (
            "harness #2 · attempt primary",
            1350.0,
            "harness #2 on primary, 350 ms after the deadline",
        ),
        (
            "transport #2 · attempt primary",
            1350.0,
            "transport #2 on primary, 350 ms after the deadline",
        ),
    ]
    late = w["late_spec"][0]
    assert late["encoding"]["x"]["field"] == "end_ms"  # where the answer came
    assert late["encoding"]["tooltip"][0]["title"] == "success after the deadline"


def test_waterfall_tooltips_read_as_text(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    w = waterfall(app)
    titles = [t["title"] for t in w["bar_spec"][0]["encoding"]["tooltip"]]
    assert titles == [t for _, t in page.WATERFALL_TOOLTIP]
    assert {
        "Backoff before it",
        "Retry-After",
        "HTTP",
        "Deadline left at dispatch",
        "Cost",
    } <= set(titles)
    rows = {b[TIP["Layer / attempt"]]: b for b in _attempts(w)}
    send = rows["transport #1"]
    shown = {
        "Layer / attempt": "transport #1",
        "Route": "primary",
        "Outcome": "retryable / rate_limited",
        "HTTP": "429",
        "Start": "0.0 ms after the request started",
        "Duration": "600 ms",
        "Backoff before it": "–",
        "Retry-After": "–",
        "Deadline left at dispatch": "1,000 ms",
        "Cost": "$0.001 (estimate)",
        "Decision": "–",
    }
    assert {k: send[TIP[k]] for k in shown} == shown
    assert all(b[c] is not None for b in w["bar"] for c, _ in page.WATERFALL_TOOLTIP)


def test_a_fallback_attempt_is_marked(app: AppTest) -> None:
    follow(app, "request", {"id": "widening"})
    w = waterfall(app)
    # which attempt it followed and the route it went to, as recorded (text, not markdown)
    [mark] = w["fallback"]
    assert mark["fallback_text"] == f"after harness #1 on primary, to {HOSTILE_ROUTE}"
    fallback = next(b for b in _attempts(w) if b["row"] == mark["row"])
    assert (fallback[TIP["Layer / attempt"]], fallback[TIP["Route"]]) == (
        "harness #2",
        HOSTILE_ROUTE,
    )
    assert mark["start_ms"] == fallback["start_ms"]
    spec = w["fallback_spec"][0]
    # ending where its bar starts, above the backoff gap's line
    assert (spec["mark"]["align"], spec["mark"]["baseline"]) == ("right", "bottom")
    assert spec["encoding"]["tooltip"][0]["title"] == "fallback"


def test_classes_by_name_with_their_digests_beside(app: AppTest) -> None:
    follow(app, "request", {"id": "widening"})
    contract = app.markdown[0]
    # the names recorded beside the classes, verbatim (no emphasis from the `*`s)
    assert f"required capability: **{CAPABILITY_NAME}**" in rendered(contract.value)
    assert f"required behavior: **{BEHAVIOR_NAME}**" in rendered(contract.value)
    assert "\\*json\\*" in contract.value
    # the tooltip: each class's name and what the rules compare
    assert rendered(contract.proto.help).splitlines() == [
        f"required capability: {CAPABILITY_NAME} (cap-1)  ",
        f"required behavior: {BEHAVIOR_NAME} (incident-severity@v3)",
    ]
    # the detail panel: the name and the class; a class with no name as recorded
    details = {}
    for rid, route in (("widening", HOSTILE_ROUTE), ("degraded", "fb-cheap")):
        follow(app, "request", {"id": rid})
        bar = next(b for b in _attempts(waterfall(app)) if b[TIP["Route"]] == route)
        select_chart(app, f"tree:{rid}", {"pick": [{"span_id": bar["span_id"]}]})
        details[rid] = {k: rendered(v) for k, v in app.table[0].value["Value"].items()}
    assert details["widening"]["Route behavior class"] == (
        f"{BEHAVIOR_NAME} (incident-severity@v3)"
    )
    assert details["degraded"]["Route behavior class"] == "cheaper@v1"
    # the findings' evidence: a named class with its name, the other as recorded
    [evidence] = table(app, 0)["evidence_text"]
    assert evidence == (
        "route id: fb-cheap · route behavior class: cheaper@v1 · required behavior class: "
        f"{BEHAVIOR_NAME} (incident-severity@v3)"
    )


def _tree(at: AppTest) -> list[dict[str, Any]]:
    """The waterfall's rows: the data of its bars."""
    return waterfall(at)["bar"]


def test_span_tree_shows_every_span_beneath_the_request(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    assert app.subheader[0].value == "Span tree: 6 span(s)"
    assert [r["row"] for r in _tree(app)] == [
        "▾ logical_request chat",
        "│ ▾ harness #1 · attempt primary",
        "│ │ · transport #1 · attempt primary",
        "│ ▾ harness #2 · attempt primary",
        "│ │ ▾ transport #2 · attempt primary",
        "│ │ │ · chat gpt-test",  # a span no retryscope call made, beneath the send
    ]
    genai = _tree(app)[-1]
    assert (genai["depth"], genai["kind"]) == (3, "span unset")
    details = {k: rendered(v) for k, v in app.table[0].value["Value"].items()}
    assert details["Role"] == "logical_request"  # the root's, until a span is clicked
    assert details["Status"] == "ERROR — stop_deadline"
    select_chart(app, "tree:deadline", {"pick": [{"span_id": genai["span_id"]}]})
    details = {k: rendered(v) for k, v in app.table[0].value["Value"].items()}
    assert details["GenAI model"] == "gpt-test → gpt-test-2026-09"
    assert details["Tokens in / out"] == "120 / 48"
    assert details["GenAI provider"] == "openai"
    assert app.query_params["span"] == genai["span_id"]  # this view can be shared


def test_a_span_link_opens_its_details_with_the_error_redacted(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    send = next(r for r in _tree(app) if r["row"].endswith("transport #1 · attempt primary"))
    follow(app, "request", {"id": "deadline", "span": send["span_id"]})
    details = {k: rendered(v) for k, v in app.table[0].value["Value"].items()}
    assert details["HTTP"] == "429"
    assert details["Outcome"] == "retryable / rate_limited"
    assert details["Route"] == "primary"
    assert details["Deadline left at dispatch"] == "1,000 ms"
    assert details["Cost"] == "$0.001 (estimate)"
    events = app.dataframe[0].value.to_dict("records")
    assert [e["Event"] for e in events] == ["exception"]
    shown = events[0]["Attributes"]
    assert "exception.type: RateLimitError" in shown
    assert "hunter2" not in shown
    assert "sk-live-abcdef123456" not in shown
    assert "https://REDACTED@api.example/v1?api_key=REDACTED" in shown
    assert LEAKY_ERROR not in shown


def test_span_tree_collapses(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    toggle = next(b for b in app.button if b.label.startswith("Collapse its"))
    assert toggle.label == "Collapse its 2 child span(s)"
    toggle.click().run()
    assert [r["row"] for r in _tree(app)] == ["▸ logical_request chat"]
    next(b for b in app.button if b.label == "Expand all").click().run()
    assert len(_tree(app)) == 6
    next(b for b in app.button if b.label == "Collapse attempts").click().run()
    assert [r["row"] for r in _tree(app)] == [
        "▾ logical_request chat",
        "│ ▸ harness #1 · attempt primary",
        "│ ▸ harness #2 · attempt primary",
    ]


def test_findings_and_the_compact_attempts_table(app: AppTest) -> None:
    follow(app, "request", {"id": "deadline"})
    findings = table(app, 0)
    assert list(findings["rule_id"]) == ["deadline_exhausted", "doomed_dispatch", "late_success"]
    assert "late ms: 350.0" in findings["evidence_text"].iloc[2]
    attempts = table(app, 1)
    assert list(attempts.columns[:10]) == [
        "layer",
        "attempt_ordinal",
        "route_id",
        "kind",
        "http_status_code",
        "duration_ms",
        "cost_micros",
        "backoff_delay_ms",
        "retry_after_ms",
        "deadline_remaining_ms",
    ]
    assert list(attempts["cost_micros"]) == ["–", "$0.001", "–", "$0.0025"]
    assert "None" not in attempts.to_string()
    assert metrics(app)["Cost"] == "$0.0035"


def test_search_by_trace_id_and_idempotency_digest(app: AppTest, ui_data: Path) -> None:
    ids = _ids(ui_data)
    open_page(app, "request")
    assert "Enter a logical request id" in app.info[0].value
    type_text(app, "request_search", ids["trace"])
    assert metrics(app) == NESTED
    type_text(app, "request_search", ids["digest"])
    assert metrics(app) == NESTED
    assert app.query_params["id"] == ids["digest"]  # the URL names what is shown


@pytest.mark.parametrize(
    "hostile",
    [
        "nested' OR '1'='1",
        "x'; DROP TABLE spans; --",
        "' UNION SELECT * FROM read_csv('/etc/passwd') --",
        '"; SELECT 1; --',
    ],
)
def test_hostile_search_text_is_data(app: AppTest, hostile: str) -> None:
    open_page(app, "request")
    type_text(app, "request_search", hostile)
    assert "No logical request, trace or idempotency digest matches" in app.warning[0].value
    type_text(app, "request_search", "deadline")
    assert metrics(app)["Terminal"] == "stop_deadline"


def test_trace_link_uses_the_url_template(ui_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(ui_data))
    monkeypatch.setenv(TRACE_URL_ENV, "http://localhost:16686/trace/{trace_id}")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["id"] = "nested"
    at.run()
    open_page(at, "request")
    (button,) = at.get("link_button")
    assert button.proto.url == f"http://localhost:16686/trace/{_ids(ui_data)['trace']}"


def test_without_a_template_the_trace_id_is_shown(app: AppTest, ui_data: Path) -> None:
    follow(app, "request", {"id": "ok1"})
    assert not app.get("link_button")
    trace = _ids(ui_data)["trace"]
    assert any(TRACE_URL_ENV in c.value for c in app.caption)
    assert not any(trace in c.value for c in app.caption)  # ok1 has its own trace


@pytest.mark.parametrize("rid", ["nested", "deadline", "widening"])
def test_the_waterfall_marks_send_only_what_they_draw(app: AppTest, rid: str) -> None:
    follow(app, "request", {"id": rid})
    _, data = charts(app)[0]
    for drawn in data.values():
        assert "trace_id" not in drawn.column_names
        assert "request_terminal" not in drawn.column_names
