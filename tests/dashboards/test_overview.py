"""Overview page and app shell: the KPI row against the known data set and the requests each
KPI opens, change vs the previous period (arrows and units), top offenders, trends (bucket
width of the scope, gaps, one time axis, click and brush), filters in the URL and kept
across pages, time presets, missing/empty/unreadable data."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.proto.Metric_pb2 import Metric
from streamlit.testing.v1 import AppTest

from retryscope.analytics import build_report
from retryscope.analytics._dataset import MEMORY_LIMIT_ENV
from retryscope.analytics.model._partitions import PARTITIONS_ENV
from retryscope.cli import main
from retryscope.dashboards.serve import APP, DATA_ENV
from tests.dashboards.conftest import (
    charts,
    deltas,
    follow,
    kpi_links,
    metrics,
    open_page,
    rendered,
    select,
    select_chart,
    select_row,
    start_app,
    table,
    type_text,
)
from tests.recorder import Recorder
from tests.test_report_empty import _no_sends, _zero_code_calls
from tests.ui_fixture import HOSTILE_ROUTE, PERIOD, START

WHOLE = {
    "Logical requests": "9",
    # 21 receiver attempts / 9 distinct operations (one per request on this data set: the
    # definitions apart are in test_same_figures.py)
    "Retry amplification": "2.33×",
    "Sends / request": "2.33×",  # 21 receiver attempts / 9 requests
    "Cost amplification": "2.75×",  # $0.0055 spent / $0.002 accepted
    "Fallback rate": "33.3%",
    "Deadline exhausted": "11.1%",
    # errors and warnings: nested, widening, mismatch, one late success (not one per
    # layer: the harness attempt and its send are one answer), 1 storm window (the nested
    # request's 8 repeats; the four windows of one request retried once are within the
    # retry budget's floor of 3 repeats)
    "Violations": "5",
}
ISO = "%Y-%m-%dT%H:%M:%SZ"


def test_kpis_of_the_whole_data_set(app: AppTest) -> None:
    assert metrics(app) == WHOLE
    assert all(d is None for d in deltas(app).values())
    assert "Set a time range" in app.caption[0].value


def test_the_headline_is_drawn_before_the_report_is_computed(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first row reads the headline (the model's rollups at scale), not the report: with
    the report failing, every card but Violations is already on the page, with its value."""
    from retryscope.dashboards import _data

    def failing(*_: object) -> object:
        raise RuntimeError("the report is still being computed")

    monkeypatch.setitem(_data.QUERIES, "report", failing)
    monkeypatch.setenv(DATA_ENV, str(ui_data))
    st.cache_data.clear()
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    shown = metrics(at)
    assert shown == {k: v for k, v in WHOLE.items() if k != "Violations"}
    assert at.error  # the page's error boundary, below the cards


def test_each_kpi_opens_the_requests_it_counts(app: AppTest) -> None:
    assert kpi_links(app) == {
        "Logical requests": {"sort": "started_at", "order": "asc"},
        "Retry amplification": {"has": "retried", "sort": "excess_attempts"},
        "Sends / request": {"min_attempts": "2"},
        "Cost amplification": {"has": "wasted", "sort": "wasted_micros"},
        "Fallback rate": {"has": "fallback"},
        "Deadline exhausted": {"terminal": "stop_deadline", "sort": "duration_ms"},
        "Violations": {"has": "violation", "sort": "findings"},
    }
    follow(app, "requests", kpi_links(app)["Deadline exhausted"])
    assert list(table(app)["logical_request_id"]) == ["deadline"]


def test_kpi_links_keep_the_filters(app: AppTest) -> None:
    select(app, "filter_tenant", "acme")
    assert kpi_links(app)["Retry amplification"] == {
        "tenant": "acme",
        "has": "retried",
        "sort": "excess_attempts",
    }
    assert app.query_params["tenant"] == "acme"  # the URL names the filter too


def test_model_cache_serves_the_same_figures(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With $RETRYSCOPE_MODEL_CACHE the first start saves the built model and the next one
    (the data set opened anew) reads it instead of rebuilding; same figures."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    assert metrics(start_app(data, monkeypatch, model_cache=cache)) == WHOLE
    (manifest,) = cache.glob("model-*/manifest.json")
    written = manifest.stat().st_mtime_ns
    st.cache_resource.clear()  # as a restarted server: the data set is opened again
    assert metrics(start_app(data, monkeypatch, model_cache=cache)) == WHOLE
    assert manifest.stat().st_mtime_ns == written  # read, not rebuilt and saved again


def test_memory_limit_from_the_environment(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RETRYSCOPE_MEMORY_LIMIT caps DuckDB (same figures, built into a cache under it);
    a size DuckDB does not accept is named on the page instead of a traceback."""
    data = tmp_path / "spans"
    shutil.copytree(ui_data, data)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "128MB")
    assert metrics(start_app(data, monkeypatch, model_cache=tmp_path / "cache")) == WHOLE
    st.cache_resource.clear()
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "plenty")
    at = start_app(data, monkeypatch)
    assert [rendered(e.value) for e in at.error] == [
        f"Cannot open {data}: memory limit 'plenty' is not a size DuckDB accepts "
        "(e.g. 1.5GB, 800MB): Parser Error: Memory must have a number (e.g. 1GB)"
    ]
    assert not at.metric


def test_a_model_built_in_partitions_serves_the_same_figures(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a cache, a model built in request partitions serves the same figures, and
    the app's connection keeps reading it across reruns."""
    data = tmp_path / "spans"
    shutil.copytree(ui_data, data)
    monkeypatch.setenv(PARTITIONS_ENV, "3")
    at = start_app(data, monkeypatch)
    assert metrics(at) == WHOLE
    st.cache_data.clear()  # the next run asks DuckDB again, on the same connection
    at.run()
    assert metrics(at) == WHOLE


def _main(spec: dict[str, Any]) -> dict[str, Any]:
    """The layer of a trend chart its selections are bound to (its main mark)."""
    views = spec["params"][0]["views"]
    layer: dict[str, Any] = next(x for x in spec["layer"] if x.get("name") in views)
    return layer


def _trends(at: AppTest) -> list[tuple[dict[str, Any], dict[str, list[Any]]]]:
    """Per trend chart: its spec and its main mark's data (as columns; Altair lifts the
    data to the chart when every layer shares it, as without storm windows)."""
    return [
        (spec, data[(_main(spec).get("data") or spec["data"])["name"]].to_pydict())
        for spec, data in charts(at)
    ]


def test_trends_share_one_time_axis_and_break_at_empty_slots(app: AppTest) -> None:
    trends = _trends(app)
    assert len(trends) == 3
    axes = [_main(spec)["encoding"]["x"] for spec, _ in trends]
    assert all(axis == axes[0] for axis in axes)  # same field, domain, scale and labels
    requests, amplification, retry_fraction = (data for _, data in trends)
    assert sum(n for n in requests["logical_requests"] if n) == 9
    assert max(r for r in amplification["amplification_ratio"] if r is not None) == 9.0
    # 30 s buckets from 14:08 to 14:19: the empty ones are rows without a value (a gap in
    # the line, not a line drawn across them)
    assert amplification["amplification_ratio"].count(None) > 0
    assert requests["label"] == amplification["label"]
    # every 60 s load window between the first and the last, empty ones without a value
    assert len(retry_fraction["retry_fraction"]) == 12
    assert retry_fraction["retry_fraction"].count(None) == 3
    spec, data = charts(app)[0]
    bands = data[spec["layer"][0]["data"]["name"]]
    # five 60 s windows hold a request that retried, all over the 10 % retry budget; only
    # the nested request's window holds more than the floor of 3 repeats
    assert bands.num_rows == 1


def test_bucket_width_follows_the_filtered_scope(app: AppTest) -> None:
    assert "Per 30 s of the requests in scope" in app.caption[-1].value  # 11 min of data
    select(app, "filter_tenant", "globex")  # mismatch, deadline, ok2: 3 min apart
    assert "Per 5 s of the requests in scope" in app.caption[-1].value
    labels = _trends(app)[0][1]["label"]
    assert (labels[0], labels[-1]) == ("2026-09-21T14:16:20Z", "2026-09-21T14:19:20Z")


def test_a_click_on_a_bucket_lists_its_requests(app: AppTest) -> None:
    labels = _trends(app)[0][1]["label"]
    first = (START - timedelta(seconds=20)).strftime(ISO)  # the nested request's bucket
    assert first in labels
    select_chart(app, "trend_requests", {"pick": [{"label": first}]})
    assert app.header[0].value == "Requests"
    until = (START + timedelta(seconds=10)).strftime(ISO)
    assert dict(app.query_params) == {"since": first, "until": until}
    assert list(table(app)["logical_request_id"]) == ["nested"]


def test_a_click_on_a_point_lists_that_slot_s_repeated_requests(app: AppTest) -> None:
    window = (START - timedelta(seconds=20)).strftime(ISO)  # 14:13:00, a storm window
    select_chart(app, "trend_retry_fraction", {"pick": [{"label": window}]})
    assert app.header[0].value == "Requests"
    until = (START + timedelta(seconds=40)).strftime(ISO)  # one 60 s load window
    assert dict(app.query_params) == {"since": window, "until": until, "has": "retried"}
    assert list(table(app)["logical_request_id"]) == ["nested"]


def test_a_brush_narrows_the_time_range(app: AppTest) -> None:
    lo, hi = START.timestamp() * 1000, (START.timestamp() + 300) * 1000
    select_chart(app, "trend_amplification", {"zoom": {"start": [lo, hi]}})
    assert app.text_input(key="filter_since").value == "2026-09-21T14:13:20Z"
    assert app.text_input(key="filter_until").value == "2026-09-21T14:18:20Z"
    assert metrics(app)["Logical requests"] == "5"  # nested … deadline
    assert app.query_params["since"] == "2026-09-21T14:13:20Z"
    # clearing the filters is not undone by the brush the chart still holds
    app.button[0].click().run()
    assert metrics(app) == WHOLE


def test_time_presets(app: AppTest) -> None:
    assert app.session_state["filter_preset"] == "All"
    app.button_group[0].set_value("15 min").run()
    # the last request (ok2, 14:19:20) minus 15 minutes: all nine
    assert app.text_input(key="filter_since").value == "2026-09-21T14:04:20.000001Z"
    assert metrics(app)["Logical requests"] == "9"
    assert "previous period" in app.caption[0].value
    type_text(app, "filter_since", "2026-09-21T14:13:20Z")
    assert app.session_state["filter_preset"] is None  # a custom range
    app.button_group[0].set_value("All").run()
    assert app.text_input(key="filter_since").value == ""
    assert metrics(app) == WHOLE


def test_change_vs_previous_period(app: AppTest) -> None:
    type_text(app, "filter_since", "2026-09-21T14:13:20Z")
    type_text(app, "filter_until", "2026-09-21T14:23:20Z")
    shown = metrics(app)
    assert shown["Logical requests"] == "7"
    assert shown["Retry amplification"] == "2.71×"  # 19 / 7
    assert shown["Fallback rate"] == "42.9%"
    change = deltas(app)
    assert change["Logical requests"] == "+5"  # vs prev1, prev2
    assert change["Retry amplification"] == "+1.71×"  # vs 1.00×
    assert change["Fallback rate"] == "+42.9 pp"  # a rate changes in percentage points
    assert "previous period 2026-09-21 14:03:20 – 2026-09-21 14:13:20" in app.caption[0].value


def test_a_fall_points_down_and_is_green_when_a_rise_is_bad(app: AppTest) -> None:
    """ok1 and ok2 (one attempt each) against the five requests before them."""
    type_text(app, "filter_since", "2026-09-21T14:18:20Z")
    type_text(app, "filter_until", "2026-09-21T14:23:20Z")
    change = deltas(app)
    assert change["Retry amplification"] == "-2.40×"  # 1.00× vs 17 / 5
    assert change["Sends / request"] == "-2.40×"
    assert change["Fallback rate"] == "-60.0 pp"
    amplification = next(m for m in app.metric if m.label == "Retry amplification").proto
    assert amplification.direction == Metric.MetricDirection.DOWN
    assert amplification.color == Metric.MetricColor.GREEN
    requests = next(m for m in app.metric if m.label == "Logical requests").proto
    assert (requests.direction, requests.color) == (
        Metric.MetricDirection.DOWN,
        Metric.MetricColor.RED,  # fewer requests: a fall that is not good
    )


def test_top_offenders_open_their_requests(app: AppTest) -> None:
    routes = table(app, 0)
    assert list(routes["value"][:1]) == ["primary"]
    # 18 receiver attempts for 9 operations (one per request)
    assert list(routes["excess_attempts"][:1]) == [9]
    layers = table(app, 3)
    # retries: transport 2 + 2 + 2 in nested's groups, harness 2 + 1 + 1 + 1 + 1
    assert list(layers["value"]) == ["transport", "harness"]
    assert list(layers["excess_attempts"]) == [6, 6]
    select_row(app, "offenders_route", 0)
    assert app.header[0].value == "Requests"
    assert dict(app.query_params) == {
        "route": "primary",
        "has": "retried",
        "sort": "excess_attempts",
    }
    assert app.sidebar.selectbox(key="filter_route").value == "primary"


def test_filters_live_in_the_url_and_survive_navigation(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_ENV, str(ui_data))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(
        {"since": PERIOD[0].strftime(ISO), "until": PERIOD[1].strftime(ISO), "route": HOSTILE_ROUTE}
    )
    at.run()  # a shared link opened in a new session
    assert at.sidebar.selectbox(key="filter_route").value == HOSTILE_ROUTE
    assert metrics(at)["Logical requests"] == "1"
    at.query_params.clear()  # the navigation menu switches pages without a query string
    open_page(at, "fallbacks")
    assert metrics(at)["Boundary widened"] == "1"  # the filters were kept …
    assert at.query_params["route"] == HOSTILE_ROUTE  # … and written back into the URL
    assert at.query_params["since"] == PERIOD[0].strftime(ISO)


def test_a_bad_url_value_is_named_and_ignored(
    ui_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_ENV, str(ui_data))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update({"tenant": "nobody", "since": "'; DROP TABLE spans; --"})
    at.run()
    warnings = " ".join(w.value for w in at.sidebar.warning)
    assert "`tenant=nobody` in the URL: no such tenant in the data; ignored." in warnings
    assert "invalid time" in warnings
    assert metrics(at) == WHOLE


def test_hostile_time_text_is_an_error_not_sql(app: AppTest) -> None:
    type_text(app, "filter_since", "'; DROP TABLE spans; --")
    assert "Since (UTC): invalid time" in app.sidebar.error[0].value
    type_text(app, "filter_until", "read_csv('/etc/passwd')")
    assert len(app.sidebar.error) == 2
    assert metrics(app) == WHOLE  # the bounds are ignored, the data intact


def _run_on(monkeypatch: pytest.MonkeyPatch, data: Path | None) -> AppTest:
    if data is None:
        monkeypatch.delenv(DATA_ENV, raising=False)
    else:
        monkeypatch.setenv(DATA_ENV, str(data))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    return at


def test_missing_and_empty_data_show_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "No data directory" in _run_on(monkeypatch, tmp_path / "nope").info[0].value
    assert "No span files" in _run_on(monkeypatch, tmp_path).info[0].value
    assert "No data directory" in _run_on(monkeypatch, None).info[0].value


def test_spans_in_no_logical_request_are_explained_not_shown_as_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's reason on the Overview and on a page of one metric, no KPI cards."""
    recorder = Recorder(tmp_path / "spans")
    _no_sends(recorder)
    reason = build_report(recorder.connect())["empty_reason"]
    assert reason.startswith("20 spans, none in a logical request")
    at = _run_on(monkeypatch, recorder.directory)
    assert [rendered(w.value) for w in at.warning] == [f"Nothing to audit: {reason}."]
    assert not at.metric
    open_page(at, "amplification")
    assert [rendered(w.value) for w in at.warning] == [f"Nothing to audit: {reason}."]
    assert not at.metric


def test_implicit_requests_show_the_reports_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls recorded without a logical request: the Overview shows what the report
    counts (tests/test_implicit_requests.py), not the reason for zeros."""
    recorder = Recorder(tmp_path / "spans")
    _zero_code_calls(recorder)
    report = build_report(recorder.connect())
    assert (report["logical_requests"], report["receiver_attempts"]) == (5, 15)
    at = _run_on(monkeypatch, recorder.directory)
    assert not at.warning
    shown = metrics(at)
    assert shown["Logical requests"] == "5"
    assert shown["Retry amplification"] == shown["Sends / request"] == "3.00×"


def test_ui_refuses_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`retryscope ui /nonexistent` names the problem and starts no server."""
    assert main(["ui", str(tmp_path / "nonexistent"), "--port", "1"]) == 2
    assert f"no data directory or file at {tmp_path / 'nonexistent'}" in capsys.readouterr().err


def test_unreadable_files_are_listed_and_the_rest_shown(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "copy"
    shutil.copytree(ui_data, data)
    (data / "broken.parquet").write_bytes(b"PAR1 not really")
    at = _run_on(monkeypatch, data)
    assert "1 unreadable file(s) skipped" in at.warning[0].value
    assert "broken.parquet" in at.warning[0].value
    assert metrics(at) == WHOLE


def test_only_unreadable_files_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.parquet").write_bytes(b"")
    at = _run_on(monkeypatch, tmp_path)
    assert "broken.parquet" in at.warning[0].value
    assert "No readable span files" in at.info[0].value
