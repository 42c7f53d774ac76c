"""Amplification, Fallbacks, Deadlines & latency and Findings pages over the known data set,
with the sidebar's filters (including hostile tenant/route values, matched as data)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.dashboards.conftest import charts, metrics, open_page, select, subheaders
from tests.ui_fixture import HOSTILE_ROUTE, HOSTILE_TENANT


def test_amplification_page(app: AppTest) -> None:
    open_page(app, "amplification")
    assert metrics(app) == {
        "Amplification": "2.33×",
        "Receiver attempts": "21",
        "Hidden attempts": "6",  # nested: 9 receiver attempts for 3 harness attempts
        "Nested-retry requests": "1",
        "Largest product": "9×",
    }
    by_layer, by_route, nested = (d.value for d in app.dataframe)
    assert dict(zip(by_layer["layer"], by_layer["receiver_attempts"], strict=True)) == {
        "harness": 12,
        "transport": 9,
    }
    assert dict(zip(by_route["route"], by_route["physical_attempts"], strict=True)) == {
        "primary": 21,
        "fb-cheap": 1,
        "fb-other": 1,
        HOSTILE_ROUTE: 1,
    }
    assert nested[["logical_request_id", "product", "multiplication", "open"]].to_dict(
        "records"
    ) == [
        {
            "logical_request_id": "nested",
            "product": "harness 3 × transport 3",
            "multiplication": 9,
            "open": "request?id=nested",
        }
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
    cells = matrix.to_pylist()
    assert {(c["attempt_ordinal"], c["label"]) for c in cells} == {
        # transport ordinals count per layer across the request: 1-3 | 4-6 | 7-9
        (2, "0% of 1"),
        (3, "0% of 1"),
        (5, "0% of 1"),
        (6, "0% of 1"),
        (8, "0% of 1"),
        (9, "100% of 1"),
    }


def test_hostile_tenant_is_matched_as_a_value(app: AppTest) -> None:
    assert HOSTILE_TENANT in app.sidebar.selectbox(key="filter_tenant").options
    select(app, "filter_tenant", HOSTILE_TENANT)
    open_page(app, "amplification")
    shown = metrics(app)
    assert (shown["Amplification"], shown["Receiver attempts"]) == ("2.00×", "2")
    open_page(app, "fallbacks")
    assert metrics(app)["Boundary widened"] == "1"


def test_fallbacks_page(app: AppTest) -> None:
    open_page(app, "fallbacks")
    assert metrics(app) == {
        "Fallback rate": "33.3%",
        "Fallback success": "100.0%",
        "Fallback quality": "0.0%",
        "Degraded": "1",
        "Boundary widened": "1",
    }
    assert subheaders(app)[1:] == [
        "Incompatible (capability mismatch): 1",
        "Degraded (other behavior class): 1",
        "Boundary widening: 1",
    ]
    listed = [d.value for d in app.dataframe][1:]
    assert [list(t["logical_request_id"]) for t in listed] == [
        ["mismatch"],
        ["degraded"],
        ["widening"],
    ]
    assert list(listed[2]["open"]) == ["request?id=widening"]


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
        "Late successes": "1",
        "Doomed dispatches": "1",  # the retry sent with 50 ms left (route median 100 ms)
        "Deadline miss rate": "50.0%",  # of the 2 requests with a deadline
        "Logical p50": "290.0 ms",
        "Logical p95": "970.0 ms",
        "Logical p99": "1,274.0 ms",
        "Retry tail at p99": "706.0 ms",
    }
    _, data = charts(app)[0]
    (bars,) = data.values()
    got = {(r["percentile"], r["kind"]): round(r["ms"], 1) for r in bars.to_pylist()}
    assert got[("p50", "first attempt")] == 100.0
    assert got[("p99", "first attempt")] == 568.0


def test_operation_filter(app: AppTest) -> None:
    select(app, "filter_operation", "embed")
    open_page(app, "deadlines")
    shown = metrics(app)
    assert (shown["Deadline exhausted"], shown["Logical p50"]) == ("0", "100.0 ms")


def test_findings_page_filters_and_links_rows_to_the_drill_down(app: AppTest) -> None:
    open_page(app, "findings")
    (table,) = (d.value for d in app.dataframe)
    assert len(table) == 11
    assert dict(table["rule_id"].value_counts()) == {
        "retry_budget_exceeded": 5,
        "nested_retry_owners": 1,
        "fallback_boundary_widening": 1,
        "fallback_capability_mismatch": 1,
        "degraded_fallback": 1,
        "late_success": 1,
        "doomed_dispatch": 1,
    }
    app.multiselect(key="findings_severity").select("info").run()
    (table,) = (d.value for d in app.dataframe)
    assert sorted(table["logical_request_id"]) == ["deadline", "degraded"]
    app.multiselect(key="findings_severity").unselect("info").run()
    app.multiselect(key="findings_rules").select("fallback_boundary_widening").run()
    (table,) = (d.value for d in app.dataframe)
    assert table[["rule_id", "severity", "logical_request_id", "open"]].to_dict("records") == [
        {
            "rule_id": "fallback_boundary_widening",
            "severity": "error",
            "logical_request_id": "widening",
            "open": "request?id=widening",
        }
    ]
    assert '"route_data_boundary":"external_provider"' in table["evidence"].iloc[0].replace(" ", "")


def test_selecting_a_finding_opens_its_request(app: AppTest) -> None:
    open_page(app, "findings")
    (table,) = (d.value for d in app.dataframe)
    assert list(table["rule_id"][:2]) == ["retry_budget_exceeded", "nested_retry_owners"]
    # a window-level finding names no request: selecting it stays here
    app.session_state["findings_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    app.run()
    assert app.header[0].value == "Findings"
    app.session_state["findings_table"] = {"selection": {"rows": [1], "columns": [], "cells": []}}
    app.run()
    assert not app.exception
    assert app.header[0].value == "Request drill-down"
    assert app.query_params["id"] == "nested"
    assert metrics(app)["Retry product"] == "9×"
