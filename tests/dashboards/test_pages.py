"""Amplification, Fallbacks, Deadlines & latency and Findings pages over the known data set,
with the sidebar's filters (including hostile tenant/route values, matched as data): their
figures agree with one another and with the findings, their tables are formatted, and their
numbers, bars and rows open the requests behind them."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from retryscope.analytics import RULES_BY_ID, Severity
from tests.dashboards.conftest import (
    charts,
    follow,
    kpi_links,
    metrics,
    open_page,
    select,
    select_chart,
    select_row,
    subheaders,
    table,
)
from tests.ui_fixture import (
    BEHAVIOR_NAME,
    CAPABILITY_NAME,
    HOSTILE_ROUTE,
    HOSTILE_TENANT,
    LEAKY_ERROR,
)


def _config(at: AppTest, index: int) -> dict[str, dict[str, object]]:
    """The column_config of the ``index``-th table: header label and format per column."""
    columns: dict[str, dict[str, object]] = json.loads(at.dataframe[index].proto.columns)
    return columns


def test_amplification_page(app: AppTest) -> None:
    open_page(app, "amplification")
    assert metrics(app) == {
        "Retry amplification": "2.33×",
        "Sends / request": "2.33×",
        "Receiver attempts": "21",
        "Hidden attempts": "6",  # nested: 9 receiver attempts for 3 harness attempts
        "Nested-retry requests": "1",
        "Largest product": "9×",
    }
    by_route, by_layer, nested = (d.value for d in app.dataframe)
    assert dict(zip(by_route["value"], by_route["amplification_ratio"], strict=True)) == {
        "primary": 2.0,  # 18 receiver attempts, 9 requests
        "fb-cheap": 1.0,
        "fb-other": 1.0,
        HOSTILE_ROUTE: 1.0,
    }
    # per layer, attempts per request at that layer: the harness multiplies too, without
    # a receiver attempt of its own (its receiver ratio would read 0)
    layers = {r["value"]: r for r in by_layer.to_dict("records")}
    assert round(layers["harness"]["attempts_per_request"], 2) == 1.67  # 15 / 9
    assert layers["harness"]["receiver_attempts"] == 10
    assert layers["transport"]["attempts_per_request"] == 5.5  # 11 / 2
    assert _config(app, 1)["attempts_per_request"]["label"] == "Attempts / request"
    assert nested[["logical_request_id", "product", "multiplication"]].to_dict("records") == [
        {"logical_request_id": "nested", "product": "harness 3 × transport 3", "multiplication": 9}
    ]
    assert app.selectbox(key="amplification_layer").options == ["harness", "transport"]
    (matrix,) = charts(app)[-1][1].values()
    cells = matrix.to_pylist()
    # harness attempts after `unavailable`: 2nd of nested (failed), of deadline and of the
    # three fallback requests (succeeded); 3rd of nested (succeeded)
    assert {(c["after_kind"], c["attempt_ordinal"], c["retries"], c["label"]) for c in cells} == {
        ("unavailable", 2, 5, "80% of 5"),
        ("unavailable", 3, 1, "100% of 1"),
    }
    select(app, "amplification_layer", "transport")
    (matrix,) = charts(app)[-1][1].values()
    assert {(c["attempt_ordinal"], c["label"]) for c in matrix.to_pylist()} == {
        # transport ordinals count per layer across the request: 1-3 | 4-6 | 7-9
        (2, "0% of 1"),
        (3, "0% of 1"),
        (5, "0% of 1"),
        (6, "0% of 1"),
        (8, "0% of 1"),
        (9, "100% of 1"),
    }


def test_amplification_bars_open_their_requests(app: AppTest) -> None:
    open_page(app, "amplification")
    assert kpi_links(app)["Nested-retry requests"] == {"has": "nested", "sort": "retry_product"}
    select_chart(app, "amp_layer", {"pick": [{"value": "transport"}]})
    assert app.header[0].value == "Requests"
    assert dict(app.query_params) == {"layer": "transport"}
    assert list(table(app)["logical_request_id"]) == ["nested"]
    open_page(app, "amplification")
    select_chart(app, "amp_route", {"pick": [{"value": "fb-cheap"}]})
    assert dict(app.query_params) == {"route": "fb-cheap", "has": "retried"}
    assert list(table(app)["logical_request_id"]) == ["degraded"]


def test_hostile_tenant_is_matched_as_a_value(app: AppTest) -> None:
    assert HOSTILE_TENANT in app.sidebar.selectbox(key="filter_tenant").options
    select(app, "filter_tenant", HOSTILE_TENANT)
    open_page(app, "amplification")
    shown = metrics(app)
    assert (shown["Retry amplification"], shown["Receiver attempts"]) == ("2.00×", "2")
    open_page(app, "fallbacks")
    assert metrics(app)["Boundary widened"] == "1"


def test_fallbacks_page_agrees_with_itself(app: AppTest) -> None:
    open_page(app, "fallbacks")
    assert metrics(app) == {
        "Fallback rate": "33.3%",
        "Fallback success": "100.0%",
        "Fallback quality": "0.0%",
        "Incompatible": "1",
        "Degraded": "1",  # the fallback metric's count, the same the degraded case lists
        "Boundary widened": "1",
    }
    assert subheaders(app) == [
        "By entry route",
        "Why fallbacks fired",
        "Cases to review: 3 request(s)",
    ]
    by_route, _, hops, cases = (d.value for d in app.dataframe)
    # why, per route hop: the route left, the one taken, the outcome it followed
    assert all(" → " in v and " after " in v for v in hops["value"])
    # rates in percent, with a header: not 0.3333 under `fallback_rate`
    assert round(by_route["fallback_rate"].iloc[0], 1) == 33.3
    assert _config(app, 0)["fallback_rate"]["label"] == "Fallback rate"
    assert _config(app, 0)["fallback_rate"]["type_config"]["format"] == "%.1f%%"
    rows = {r["logical_request_id"]: r for r in cases.to_dict("records")}
    assert {rid: r["cases"] for rid, r in rows.items()} == {
        "widening": "boundary widened",
        "degraded": "degraded",
        "mismatch": "incompatible",
    }
    # the evidence in columns of its own, nothing cut off in one JSON cell
    assert rows["widening"]["route_data_boundary"] == "external_provider"
    assert rows["widening"]["allowed_boundary"] == "private_service"
    assert rows["degraded"]["route_behavior_class"] == "cheaper@v1"
    assert (rows["mismatch"]["route_capability_digest"], rows["mismatch"]["route_id"]) == (
        "cap-2",
        "fb-other",
    )
    assert rows["degraded"]["route_data_boundary"] == "–"  # not "None"
    # a class by the name recorded beside it (on any span), as recorded where none was
    assert rows["mismatch"]["required_capability_digest"] == CAPABILITY_NAME
    assert rows["degraded"]["required_behavior_class"] == BEHAVIOR_NAME
    assert "digest" in _config(app, 3)["route_capability_digest"]["help"]
    assert kpi_links(app)["Degraded"] == {"rule": "degraded_fallback"}
    select_row(app, "fallback_cases", 0)
    assert app.header[0].value == "Request drill-down"
    assert app.query_params["id"] == "widening"


def test_route_filter_with_a_hostile_route(app: AppTest) -> None:
    select(app, "filter_route", HOSTILE_ROUTE)
    open_page(app, "fallbacks")
    shown = metrics(app)
    assert (shown["Fallback rate"], shown["Boundary widened"]) == ("100.0%", "1")
    select(app, "filter_tenant", "acme")  # no acme request touched that route
    assert "No logical requests match the filters" in app.info[0].value


def test_deadlines_page(app: AppTest) -> None:
    open_page(app, "deadlines")
    assert metrics(app) == {
        "Deadline exhausted": "1",
        "Exhausted rate": "11.1%",
        # one request succeeded late, through a harness attempt and the send beneath it:
        # one late success here and one late_success finding on the Findings page
        "Late successes": "1",
        "Doomed dispatches": "1",  # the retry sent with 50 ms left (route median 100 ms)
        "Deadline miss rate": "50.0%",  # of the 2 requests with a deadline
        "Logical p50": "290 ms",
        "Logical p95": "970 ms",
        "Logical p99": "1,274 ms",
        "Retry tail at p99": "706 ms",
    }
    _, data = charts(app)[0]
    (bars,) = data.values()
    got = {(r["percentile"], r["kind"]): round(r["ms"], 1) for r in bars.to_pylist()}
    assert got[("p50", "first attempt")] == 100.0
    assert got[("p99", "first attempt")] == 568.0
    assert subheaders(app)[-1] == "Requests that missed their deadline: 1"
    _, missed = (d.value for d in app.dataframe)
    assert _config(app, 0)["logical_p99_ms"]["type_config"]["format"] == "%,.0f ms"
    assert list(missed["logical_request_id"]) == ["deadline"]
    # how late its work ran, and what the work after the deadline cost
    # (the retry's send, billed $0.0025, ended 350 ms after the 1 s deadline)
    assert round(missed["past_deadline_ms"].iloc[0]) == 350
    assert missed["after_deadline_micros"].iloc[0] == "$0.0025"
    assert list(missed.columns[:6]) == [
        "logical_request_id",
        "started_at",
        "tenant",
        "terminal",
        "past_deadline_ms",
        "after_deadline_micros",
    ]
    assert kpi_links(app)["Late successes"] == {"rule": "late_success", "sort": "duration_ms"}
    select_row(app, "missed_table", 0)
    assert app.query_params["id"] == "deadline"


def test_operation_filter(app: AppTest) -> None:
    select(app, "filter_operation", "embed")
    open_page(app, "deadlines")
    shown = metrics(app)
    assert (shown["Deadline exhausted"], shown["Logical p50"]) == ("0", "100 ms")
    assert "Every request with a deadline finished within it." in app.success[0].value


def test_findings_page_filters_and_links_rows_to_the_drill_down(app: AppTest) -> None:
    open_page(app, "findings")
    shown = table(app)
    assert dict(shown["rule_id"].value_counts()) == {
        "retry_budget_exceeded": 1,  # the nested request's window: more than 3 repeats
        "nested_retry_owners": 1,
        "fallback_boundary_widening": 1,
        "fallback_capability_mismatch": 1,
        "degraded_fallback": 1,
        "late_success": 1,  # once per request, as the Deadlines page counts
        "deadline_exhausted": 1,  # the request its deadline stopped, to open from here
        "doomed_dispatch": 1,
    }
    app.multiselect(key="findings_severity").select("info").run()
    assert sorted(table(app)["logical_request_id"]) == ["deadline", "deadline", "degraded"]
    app.multiselect(key="findings_severity").unselect("info").run()
    app.multiselect(key="findings_rules").select("fallback_boundary_widening").run()
    rows = table(app).to_dict("records")
    assert [(r["rule_id"], r["severity"], r["logical_request_id"]) for r in rows] == [
        ("fallback_boundary_widening", "error", "widening")
    ]
    # evidence as readable text, not a JSON string cut off in its cell
    assert "route data boundary: external_provider" in rows[0]["evidence_text"]
    assert "allowed boundary: private_service" in rows[0]["evidence_text"]
    assert LEAKY_ERROR not in str(rows)


def test_selecting_a_finding_opens_its_request(app: AppTest) -> None:
    select(app, "filter_tenant", "acme")
    open_page(app, "findings")
    shown = table(app)
    assert list(shown["rule_id"][:2]) == ["retry_budget_exceeded", "nested_retry_owners"]
    # a window-level finding names no request: selecting it stays here
    select_row(app, "findings_table", 0)
    assert app.header[0].value == "Findings"
    select_row(app, "findings_table", 1)
    assert app.header[0].value == "Request drill-down"
    assert dict(app.query_params) == {"tenant": "acme", "id": "nested"}  # the filter kept
    assert metrics(app)["Retry product"] == "9×"


def test_a_rule_bar_opens_its_requests(app: AppTest) -> None:
    open_page(app, "findings")
    select_chart(app, "findings_rules_chart", {"pick": [{"rule_id": "doomed_dispatch"}]})
    assert app.header[0].value == "Requests"
    assert dict(app.query_params) == {"rule": "doomed_dispatch"}
    assert list(table(app)["logical_request_id"]) == ["deadline"]


def test_findings_come_most_severe_first_with_what_to_change(app: AppTest) -> None:
    open_page(app, "findings")
    shown = table(app)
    order = [s.value for s in Severity]
    ranks = [order.index(s) for s in shown["severity"]]
    assert ranks == sorted(ranks)
    assert ranks[0] == 0  # an error finding (the boundary widening) is the first row
    assert list(shown["action"]) == [RULES_BY_ID[r].action for r in shown["rule_id"]]


def test_findings_rules_and_severity_live_in_the_url(app: AppTest) -> None:
    follow(app, "findings", {"rules": "fallback_boundary_widening,late_success"})
    assert set(table(app)["rule_id"]) == {"fallback_boundary_widening", "late_success"}
    app.multiselect(key="findings_severity").select("error").run()
    assert app.query_params["severity"] == "error"
    assert set(table(app)["rule_id"]) == {"fallback_boundary_widening"}
    follow(app, "findings", {"rules": "bogus", "severity": "fatal"})
    warnings = [w.value for w in app.warning]
    assert any(w.startswith("`rules=bogus` in the URL") for w in warnings)
    assert any(w.startswith("`severity=fatal` in the URL") for w in warnings)
    assert len(table(app)) == 8  # every finding: the bad values are ignored
