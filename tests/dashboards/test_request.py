"""Request drill-down: search by logical request id, trace id or idempotency digest; the
timeline's bars, backoff gaps, not_before marks and deadline; the trace link."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics import connect, request_summary
from retryscope.dashboards._serve import APP, DATA_ENV, TRACE_URL_ENV
from tests.dashboards.conftest import charts, metrics, open_page, type_text

NESTED = {
    "Terminal": "complete",
    "Attempts": "12",
    "Receiver attempts": "9",
    "Retry product": "9×",
    "Duration": "290.0 ms",
}


def _ids(ui_data: Path) -> dict[str, str]:
    con, _ = connect(ui_data)
    row = request_summary(con, "nested").to_pylist()[0]
    return {"trace": row["trace_id"], "digest": row["idempotency_digest"]}


def _timeline(at: AppTest) -> dict[str, list[dict[str, object]]]:
    """The timeline's data by role: bars, gaps (rules with an end), ticks, deadline."""
    ((spec, data),) = charts(at)
    out: dict[str, list[dict[str, object]]] = {}
    for layer in spec["layer"]:
        mark = layer["mark"]["type"]
        role = {"bar": "bar", "tick": "tick"}.get(mark)
        if mark == "rule":
            role = "gap" if "x2" in layer["encoding"] else "deadline"
        if role is not None:
            out[role] = data[layer["data"]["name"]].to_pylist()
    return out


def test_drill_down_from_a_link(app: AppTest) -> None:
    app.query_params["id"] = "nested"
    open_page(app, "request")
    assert app.text_input(key="request_search").value == "nested"
    assert metrics(app) == NESTED
    assert "harness × transport" in app.metric[3].delta
    marks = _timeline(app)
    harness = sorted(
        (b["start_ms"], b["end_ms"], b["outcome"]) for b in marks["bar"] if b["layer"] == "harness"
    )
    assert harness == [
        (0.0, 30.0, "retryable"),
        (130.0, 160.0, "retryable"),
        (260.0, 290.0, "success"),
    ]
    assert sorted(b["lane"] for b in marks["bar"]).count("transport · primary") == 9
    assert sorted((g["from_ms"], g["to_ms"], g["gap_ms"]) for g in marks["gap"]) == [
        (30.0, 130.0, 100.0),
        (160.0, 260.0, 100.0),
    ]
    assert sorted(t["not_before_ms"] for t in marks["tick"]) == [130.0, 260.0]
    assert "deadline" not in marks  # 5 s away: the axis spans the attempts, a caption says
    assert any("deadline, 5,000 ms after the start" in c.value for c in app.caption)
    attempts, attributes = (t.value for t in app.table)
    assert len(attempts) == 12
    assert list(attempts["backoff_delay_ms"].dropna()) == [100, 100]
    assert dict(zip(attributes["attribute"], attributes["value"], strict=True))["tenant"] == "acme"


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
    marks = _timeline(app)
    assert marks["deadline"] == [{"deadline_ms": 1000.0, "label": "deadline"}]
    assert [(b["start_ms"], b["outcome"]) for b in marks["bar"]] == [
        (0.0, "retryable"),
        (950.0, "success"),
    ]


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
    app.query_params["id"] = "ok1"
    open_page(app, "request")
    assert not app.get("link_button")
    trace = _ids(ui_data)["trace"]
    assert any(TRACE_URL_ENV in c.value for c in app.caption)
    assert not any(trace in c.value for c in app.caption)  # ok1 has its own trace
