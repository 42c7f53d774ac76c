"""The Requests explorer: its query (``retryscope.analytics._browse.request_list``) over the
known data set, and its page — every filter and sort from the URL, its counts matching the
figures that link into it, rows opening the drill-down with the filters kept."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics import Filters, build_report, connect, findings
from retryscope.analytics._browse import RequestQuery, RequestSort, request_findings, request_list
from tests import ui_fixture
from tests.dashboards.conftest import follow, rendered, select, select_row, table
from tests.ui_fixture import HOSTILE_TENANT

ALL = ["nested", "widening", "degraded", "mismatch", "deadline", "prev1", "prev2", "ok1", "ok2"]


@pytest.fixture(scope="module")
def con(ui_data: Path) -> duckdb.DuckDBPyConnection:
    con, _ = connect(ui_data)
    return con


def _ids(con: duckdb.DuckDBPyConnection, query: RequestQuery, **filters: str) -> list[str]:
    _, page = request_list(con, query, filters=Filters(**filters) if filters else None)
    return [str(x) for x in page.column("logical_request_id").to_pylist()]


def test_default_order_most_receiver_attempts_first(con: duckdb.DuckDBPyConnection) -> None:
    total, page = request_list(con)
    assert total == 9
    rows = page.to_pylist()
    # ties by start time: the three fallback requests and deadline (2 each), then the rest
    assert [r["logical_request_id"] for r in rows] == ALL
    nested = rows[0]
    assert (nested["receiver_attempts"], nested["attempts"], nested["retry_product"]) == (
        9,
        12,
        9,
    )
    assert nested["retried_layers"] == ["harness", "transport"]
    assert nested["rules"] == ["nested_retry_owners"]
    deadline = rows[4]
    assert deadline["route_path"] == "primary"
    assert (deadline["cost_micros"], deadline["wasted_micros"]) == (3_500, 3_500)
    assert deadline["rules"] == ["deadline_exhausted", "doomed_dispatch", "late_success"]
    assert deadline["violations"] == 1  # late_success; the others are informational
    assert rows[2]["route_path"] == "primary → fb-cheap"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (RequestQuery(terminal="stop_deadline"), ["deadline"]),
        (RequestQuery(rule="late_success"), ["deadline"]),
        (RequestQuery(rule="degraded_fallback"), ["degraded"]),
        (RequestQuery(layer="transport"), ["nested"]),  # the only layer retrying twice over
        (
            RequestQuery(min_receiver_attempts=2),
            ["nested", "widening", "degraded", "mismatch", "deadline"],
        ),
        (RequestQuery(min_receiver_attempts=3), ["nested"]),
        # one operation per request here: every request of 2+ sends repeated one
        (
            RequestQuery(retried=True),
            ["nested", "widening", "degraded", "mismatch", "deadline"],
        ),
        (RequestQuery(retried=False), ["prev1", "prev2", "ok1", "ok2"]),
        (RequestQuery(fallback=True), ["widening", "degraded", "mismatch"]),
        (RequestQuery(deadline_missed=True), ["deadline"]),
        (RequestQuery(nested=True), ["nested"]),
        (RequestQuery(wasted=True), ["deadline"]),
        (RequestQuery(violations=True), ["nested", "widening", "mismatch", "deadline"]),
        (RequestQuery(fallback=False, min_receiver_attempts=2), ["nested", "deadline"]),
        (RequestQuery(terminal="x'; DROP TABLE spans; --"), []),
    ],
)
def test_each_filter_selects_what_it_names(
    con: duckdb.DuckDBPyConnection, query: RequestQuery, expected: list[str]
) -> None:
    assert _ids(con, query) == expected


def test_global_filters_narrow_the_list(con: duckdb.DuckDBPyConnection) -> None:
    assert _ids(con, RequestQuery(), tenant=HOSTILE_TENANT) == ["widening"]
    assert _ids(con, RequestQuery(), route="fb-cheap") == ["degraded"]
    assert _ids(con, RequestQuery(fallback=True), tenant="globex") == ["mismatch"]


@pytest.mark.parametrize("sort", list(RequestSort))
@pytest.mark.parametrize("descending", [True, False])
def test_every_sort_orders_the_whole_scope(
    con: duckdb.DuckDBPyConnection, sort: RequestSort, descending: bool
) -> None:
    """The page is the top of the whole scope in that order (DuckDB sorts, then cuts)."""
    _, everything = request_list(con, RequestQuery(sort=sort, descending=descending, limit=100))
    rows = everything.to_pylist()
    keys = [r[sort.value] for r in rows]
    present = [k for k in keys if k is not None]
    assert present == sorted(present, reverse=descending)
    assert keys[: len(present)] == present  # missing values last, either way
    _, top = request_list(con, RequestQuery(sort=sort, descending=descending, limit=3))
    assert top.to_pylist() == rows[:3]


def test_counts_match_the_figures_that_link_here(con: duckdb.DuckDBPyConnection) -> None:
    """The explorer counts with the report's definitions: what a KPI counts, the list it
    opens holds."""
    report = build_report(con)

    def count(query: RequestQuery) -> int:
        return request_list(con, query)[0]

    assert count(RequestQuery()) == report["logical_requests"]
    assert count(RequestQuery(terminal="stop_deadline")) == report["deadline_exhausted"]
    assert count(RequestQuery(fallback=True)) == report["requests_with_fallback"]
    assert count(RequestQuery(deadline_missed=True)) == report["deadline"]["deadline_misses"]
    assert count(RequestQuery(rule="late_success")) == report["deadline"]["late_successes"]
    assert count(RequestQuery(nested=True)) == report["amplification"]["nested_retry_requests"]
    _, rows = request_list(con, RequestQuery(limit=100))
    assert (
        sum(rows.column("excess_attempts").to_pylist())
        == (report["amplification"]["excess_attempts"])
    )
    assert sum(rows.column("operations").to_pylist()) == report["operations"]
    for rule in ("degraded_fallback", "fallback_boundary_widening", "late_success"):
        assert count(RequestQuery(rule=rule)) == report["violations"][rule], rule


@pytest.mark.parametrize(
    ("field", "value"),
    [("rule", "no_such_rule"), ("limit", 0), ("limit", 100_001), ("min_receiver_attempts", -1)],
)
def test_a_bad_query_is_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field.split("_")[0]):
        RequestQuery(**{field: value})  # type: ignore[arg-type]


def test_the_page_reads_its_query_from_the_url(app: AppTest) -> None:
    follow(app, "requests", {"has": "fallback", "sort": "route_path", "order": "asc"})
    assert app.subheader[0].value == "3 of 9 requests"
    assert list(table(app)["logical_request_id"]) == ["widening", "degraded", "mismatch"]
    caption = app.caption[0].value
    assert caption.startswith("Requests with a fallback in scope, by route path (A–Z).")
    assert app.selectbox(key="req_sort").value == RequestSort.ROUTE_PATH
    # a widget changed: the URL follows
    select(app, "req_terminal", "complete")
    assert app.query_params["terminal"] == "complete"
    assert app.query_params["has"] == "fallback"


def test_the_columns_investigators_read_come_first(app: AppTest) -> None:
    follow(app, "requests", {})
    columns = list(table(app).columns)
    assert columns[:12] == [
        "logical_request_id",
        "started_at",
        "tenant",
        "terminal",
        "excess_attempts",
        "cost_micros",
        "wasted_micros",
        "findings",
        "receiver_attempts",
        "amplification_ratio",
        "duration_ms",
        "route_path",
    ]
    config = app.dataframe[0].proto.columns
    assert '"label": "Receiver attempts"' in config
    assert '"format": "%,.0f ms"' in config


def test_a_bad_url_value_is_named_and_ignored(app: AppTest) -> None:
    follow(app, "requests", {"rule": "bogus", "has": "fallback,wings", "min_attempts": "-3"})
    warnings = [w.value for w in app.warning]
    assert any("`rule=bogus`" in w for w in warnings)
    assert any("unknown flag 'wings'" in rendered(w) for w in warnings)
    assert any("`min_attempts=-3`" in w for w in warnings)
    assert app.subheader[0].value == "9 of 9 requests"


def test_a_row_opens_its_drill_down_keeping_the_filters(app: AppTest) -> None:
    select(app, "filter_tenant", "globex")
    follow(app, "requests", {"tenant": "globex", "min_attempts": "2"})
    assert list(table(app)["logical_request_id"]) == ["mismatch", "deadline"]
    select_row(app, "requests_table", 1)
    assert app.header[0].value == "Request drill-down"
    assert dict(app.query_params) == {"tenant": "globex", "id": "deadline"}
    assert rendered(app.metric[0].value) == "stop_deadline"


def test_an_empty_list_says_so(app: AppTest) -> None:
    follow(app, "requests", {"terminal": "stop_attempt_budget"})
    assert app.subheader[0].value == "0 of 9 requests"
    assert "No request in scope matches" in app.info[0].value


def test_a_request_s_findings_are_its_rows_of_all_findings(con: duckdb.DuckDBPyConnection) -> None:
    """request_findings keeps one request's rows before evaluating any rule over the scope;
    for every request they are exactly its rows of the whole list."""
    everything = findings(con).to_pylist()
    for rid in ALL:
        mine = request_findings(con, rid).to_pylist()
        want = [
            {k: r[k] for k in ("rule_id", "severity", "span_id", "time", "evidence")}
            for r in everything
            if r["logical_request_id"] == rid
        ]
        assert mine == want, rid
    assert request_findings(con, "x'; DROP TABLE spans; --").num_rows == 0


def test_distinct_calls_are_not_retries(tmp_path: Path) -> None:
    """Two sends of two distinct operations are no retry; two sends of one are: the
    per-request figures are the report's (sends ÷ distinct operations), and ``retried``
    and the amplification sort tell them apart where receiver attempts cannot."""
    con, _ = connect(ui_fixture.build_operations(tmp_path / "spans"))
    _, page = request_list(con, RequestQuery(sort=RequestSort.AMPLIFICATION))
    assert page.select(
        ["logical_request_id", "receiver_attempts", "operations", "excess_attempts"]
    ).to_pylist() == [
        {
            "logical_request_id": "resent",
            "receiver_attempts": 2,
            "operations": 1,
            "excess_attempts": 1,
        },
        {
            "logical_request_id": "multi",
            "receiver_attempts": 2,
            "operations": 2,
            "excess_attempts": 0,
        },
    ]
    assert page.column("amplification_ratio").to_pylist() == [2.0, 1.0]
    assert _ids(con, RequestQuery(retried=True)) == ["resent"]
    assert _ids(con, RequestQuery(retried=False)) == ["multi"]
    assert _ids(con, RequestQuery(min_receiver_attempts=2)) == ["multi", "resent"]
    report = build_report(con)
    assert report["amplification"]["excess_attempts"] == 1
    assert sum(page.column("operations").to_pylist()) == report["operations"] == 3
