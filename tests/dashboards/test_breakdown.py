"""Breakdown: any figure by any dimension over time — its figures are the report's over the
demo data, each value's and bucket's requests are exactly those its link lists in the
explorer, and the controls live in the URL; the explorer's ``where`` and the What-if
inputs in the URL too."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics import (
    BREAKDOWN_FIGURES,
    COMPARE_DIMENSIONS,
    RequestQuery,
    Thresholds,
    breakdown,
    build_report,
    connect,
    request_list,
)
from retryscope.dashboards.views.breakdown import FIGURES
from retryscope.demo._run import generate
from tests.dashboards.conftest import follow, select, select_chart, table

BUCKET = timedelta(minutes=5)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "spans"
    generate(out, 300, 7, progress=False)
    return out


def _ids(model: Any, query: RequestQuery) -> set[str]:
    return {
        str(r["logical_request_id"])
        for r in request_list(model, RequestQuery(**{**_fields(query), "limit": 100_000}))[
            1
        ].to_pylist()
    }


def _n(text: str) -> int:
    """A count as the table writes it (``–``: none)."""
    return 0 if text == "–" else int(text.replace(",", ""))


def _fields(query: RequestQuery) -> dict[str, Any]:
    return {f: getattr(query, f) for f in query.__dataclass_fields__}


def test_all_requests_are_the_report_s_figures(demo: Path) -> None:
    """The 'all' series over the whole range is the report's amplification, fallback rate
    and deadline exhaustion; wasted cost and violations are the explorer rows' sums; the
    buckets add up to the whole range."""
    model, _ = connect(demo)
    report = build_report(model)
    rows = breakdown(model, "route", bucket=BUCKET).to_pylist()
    (whole,) = [r for r in rows if r["series"] == "all" and r["start"] is None]
    assert whole["requests"] == report["logical_requests"] == 300
    assert whole["amplification"] == pytest.approx(report["amplification_ratio"])
    assert whole["excess_attempts"] == report["amplification"]["excess_attempts"]
    assert whole["fallback_requests"] == report["requests_with_fallback"]
    assert whole["fallback_rate"] == pytest.approx(report["fallback_rate"])
    assert whole["deadline_exhausted"] == report["deadline_exhausted"]
    assert whole["deadline_exhausted_rate"] == pytest.approx(report["deadline_exhausted_rate"])
    assert whole["wasted"] == sum(c["wasted_micros"] for c in report["cost"]["by_currency"])
    _, listed = request_list(model, RequestQuery(limit=100_000))
    assert whole["violations"] == sum(listed.column("violations").to_pylist())
    buckets = [r for r in rows if r["series"] == "all" and r["start"] is not None]
    assert len(buckets) > 1
    for figure in ("requests", "excess_attempts", "fallback_requests", "deadline_exhausted"):
        assert sum(r[figure] for r in buckets) == whole[figure], figure


@pytest.mark.parametrize("dimension", ["tenant", "http_status", "fallback_trigger", "route_hop"])
def test_each_value_s_requests_are_its_explorer_list(demo: Path, dimension: str) -> None:
    """A value's requests (whole range and per bucket) are the explorer's requests taking
    it (``where``) over that time; 'other' holds each request with another value once."""
    model, _ = connect(demo)
    rows = breakdown(model, dimension, "fallback_rate", bucket=BUCKET, top=2).to_pylist()
    values = {r["value"] for r in rows if r["series"] == "value"}
    assert 1 <= len(values) <= 2
    for r in rows:
        if r["series"] != "value" or r["start"] is not None:
            continue
        query = RequestQuery(where_dimension=dimension, where_value=r["value"])
        assert r["requests"] == len(_ids(model, query)), r["value"]
        fell_back = RequestQuery(where_dimension=dimension, where_value=r["value"], fallback=True)
        assert r["fallback_requests"] == len(_ids(model, fell_back))
    assert dimension in COMPARE_DIMENSIONS
    first = next(r for r in rows if r["series"] == "value" and r["start"] is not None)
    _, listed = request_list(
        model, RequestQuery(where_dimension=dimension, where_value=first["value"], limit=10_000)
    )
    started = pd.Series(listed.column("started_at").to_pylist())
    in_bucket = ((started >= first["start"]) & (started < first["start"] + BUCKET)).sum()
    assert first["requests"] == in_bucket


def test_the_top_values_are_those_of_most_weight(demo: Path) -> None:
    model, _ = connect(demo)
    wide = breakdown(model, "tenant", "violations", bucket=BUCKET, top=50).to_pylist()
    weights = {
        r["value"]: r["violations"] for r in wide if r["series"] == "value" and r["start"] is None
    }
    narrow = breakdown(model, "tenant", "violations", bucket=BUCKET, top=2).to_pylist()
    kept = {r["value"] for r in narrow if r["series"] == "value"}
    assert min(weights[v] for v in kept) >= max(w for v, w in weights.items() if v not in kept)
    (other,) = [r for r in narrow if r["series"] == "other" and r["start"] is None]
    assert other["violations"] == sum(w for v, w in weights.items() if v not in kept)


# The breakdown as one row per request, dimension and value joined to the explorer's rows
# (its first form): what the breakdown from per-request value keys must equal.
ROW_PER_VALUE = """
WITH rows AS (
    SELECT h,
           time_bucket(to_microseconds($bucket_us), started_at::TIMESTAMP) AS start,
           receiver_attempts, operations, excess_attempts, has_fallback, terminal,
           coalesce(wasted_micros, 0) AS wasted_micros,
           coalesce(after_deadline_micros, 0) AS after_deadline_micros, past_deadline_ms,
           violations
    FROM memo_request_rows
),
taken AS (
    SELECT v.h, v.value, r.* EXCLUDE (h)
    FROM reference_values v
    JOIN rows r ON r.h = v.h
    WHERE v.dimension = $dimension
),
ranked AS (
    SELECT value
    FROM taken
    GROUP BY value
    ORDER BY CASE $figure
                 WHEN 'amplification' THEN sum(excess_attempts)
                 WHEN 'fallback_rate' THEN rs_fallback_requests(has_fallback)
                 WHEN 'deadline_exhausted' THEN rs_exhausted_requests(terminal)
                 WHEN 'wasted' THEN sum(wasted_micros)
                 WHEN 'after_deadline' THEN sum(after_deadline_micros)
                 WHEN 'violations' THEN sum(violations)
                 ELSE count(*)
             END DESC,
             count(*) DESC,
             value
    LIMIT $top
),
series AS (
    SELECT 'value' AS series, t.value, t.* EXCLUDE (value)
    FROM taken t
    SEMI JOIN ranked k ON k.value = t.value
    UNION ALL
    SELECT DISTINCT ON (t.h) 'other', NULL, t.* EXCLUDE (value)
    FROM taken t
    ANTI JOIN ranked k ON k.value = t.value
    UNION ALL
    SELECT 'all', NULL, r.*
    FROM rows r
)
SELECT
    series,
    value,
    start,
    count(*)::BIGINT AS requests,
    rs_amplification(sum(receiver_attempts), sum(operations)) AS amplification,
    sum(excess_attempts)::BIGINT AS excess_attempts,
    rs_fallback_requests(has_fallback)::BIGINT AS fallback_requests,
    rs_fallback_rate(rs_fallback_requests(has_fallback), count(*)) AS fallback_rate,
    rs_exhausted_requests(terminal)::BIGINT AS deadline_exhausted,
    rs_deadline_exhausted_rate(rs_exhausted_requests(terminal), count(*))
        AS deadline_exhausted_rate,
    sum(wasted_micros)::BIGINT AS wasted,
    sum(after_deadline_micros)::BIGINT AS after_deadline,
    max(past_deadline_ms) AS max_past_deadline_ms,
    sum(violations)::BIGINT AS violations
FROM series
GROUP BY GROUPING SETS ((series, value, start), (series, value))
ORDER BY start NULLS FIRST, series, value
"""


@pytest.mark.parametrize("seed", [5, 31])
def test_every_figure_equals_its_rows_per_value(tmp_path: Path, seed: int) -> None:
    """Every figure by request-level (tenant, deadline left) and attempt-level (HTTP status,
    attempt ordinal, fallback hop) dimensions, with random top counts and buckets over a
    random demo run, equals the breakdown read from one row per request and value."""
    data = tmp_path / "spans"
    generate(data, 150, seed, progress=False)
    model, _ = connect(data)
    rng = random.Random(seed)
    breakdown(model, "tenant")
    con = model.con
    con.execute(
        "CREATE TEMP VIEW reference_values AS "
        "SELECT c.h, t.dimension, t.value FROM memo_compare_keys c, unnest(c.keys) AS u(k) "
        "JOIN memo_compare_totals t ON t.k = u.k"
    )
    for dimension in ("tenant", "deadline_left", "http_status", "attempt_ordinal", "route_hop"):
        for figure in BREAKDOWN_FIGURES:
            top = rng.choice([1, 2, 3, 50])
            bucket = timedelta(minutes=rng.choice([1, 5, 60]))
            got = breakdown(model, dimension, figure, bucket=bucket, top=top).to_pylist()
            params = {
                "dimension": dimension,
                "figure": figure,
                "top": top,
                "bucket_us": bucket // timedelta(microseconds=1),
            }
            want = con.sql(ROW_PER_VALUE, params=params).to_arrow_table().to_pylist()
            assert got == want, (dimension, figure, top, bucket)


def test_the_figures_follow_the_thresholds(demo: Path) -> None:
    """The breakdown's violations are the explorer's under the same thresholds, when they
    change and when they change back (the per-request values carry the explorer's rows)."""
    model, _ = connect(demo)
    strict = Thresholds(retry_budget=0.0, retry_budget_min_retries=0, sync_min_requests=2)
    seen = []
    for thresholds in (Thresholds(), strict, Thresholds()):
        rows = breakdown(model, "http_status", "violations", thresholds=thresholds).to_pylist()
        (whole,) = [r for r in rows if r["series"] == "all" and r["start"] is None]
        _, listed = request_list(model, RequestQuery(limit=100_000), thresholds=thresholds)
        assert whole["violations"] == sum(listed.column("violations").to_pylist())
        seen.append(whole["violations"])
    assert seen[0] == seen[2] != seen[1]


def test_bad_arguments_are_named(demo: Path) -> None:
    model, _ = connect(demo)
    with pytest.raises(ValueError, match="no dimension 'nope'"):
        breakdown(model, "nope")
    with pytest.raises(ValueError, match="no figure 'nope'"):
        breakdown(model, "route", "nope")
    with pytest.raises(ValueError, match="top must be within"):
        breakdown(model, "route", top=0)
    with pytest.raises(ValueError, match="no dimension"):
        RequestQuery(where_dimension="nope", where_value="x")


def _app(demo: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    from tests.dashboards.conftest import start_app

    return start_app(demo, monkeypatch)


def test_the_controls_live_in_the_url(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "fallback_rate", "by": "fallback_trigger", "top": "3"})
    assert at.header[0].value == "Breakdown"
    assert at.selectbox(key="breakdown_figure").value == "fallback_rate"
    assert at.selectbox(key="breakdown_by").value == "fallback_trigger"
    assert at.selectbox(key="breakdown_top").value == 3
    select(at, "breakdown_by", "http_status")
    assert dict(at.query_params) == {"figure": "fallback_rate", "by": "http_status", "top": "3"}
    # a reload of that URL restores them
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "wasted", "by": "tenant", "top": "10"})
    assert at.selectbox(key="breakdown_by").value == "tenant"
    assert at.selectbox(key="breakdown_top").value == 10
    follow(at, "breakdown", {"by": "nope", "top": "7"})
    warnings = [w.value for w in at.warning]
    assert any("`by=nope`" in w for w in warnings)
    assert any("`top=7`" in w for w in warnings)


def test_the_table_shows_the_report_s_figure(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = connect(demo)
    report = build_report(model)
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "fallback_rate", "by": "tenant"})
    shown = table(at)
    assert shown["name"].iloc[0] == "all requests"
    assert shown["fallback_rate"].iloc[0] == f"{report['fallback_rate'] * 100:.1f}%"
    assert shown["requests"].iloc[0] == "300"
    assert "None" not in shown.to_numpy().ravel().tolist()  # an empty bucket shows –
    assert set(FIGURES) == set(BREAKDOWN_FIGURES)


def test_a_cell_opens_its_requests(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value's whole-range cell opens the explorer on that value and the figure's
    requests; a bucket's cell adds the bucket as the time range; the list holds as many
    requests as the cell counts."""
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "fallback_rate", "by": "tenant", "top": "3"})
    shown = table(at)
    name = str(shown["name"].iloc[1])
    fell_back = _n(shown["fallback_requests"].iloc[1])
    at.session_state["breakdown_table"] = {
        "selection": {"rows": [], "columns": [], "cells": [(1, "fallback_rate")]}
    }
    at.run()
    assert at.header[0].value == "Requests"
    assert dict(at.query_params) == {"has": "fallback", "where": f"tenant:{name}"}
    assert at.subheader[0].value == f"{fell_back:,} of 300 requests"
    follow(at, "breakdown", {"figure": "requests", "by": "tenant", "top": "3"})
    shown = table(at)
    bucket = next(c for c in shown.columns if c.endswith("Z"))
    count = _n(shown[bucket].iloc[1])
    name = str(shown["name"].iloc[1])
    at.session_state["breakdown_table"] = {
        "selection": {"rows": [], "columns": [], "cells": [(1, bucket)]}
    }
    at.run()
    assert at.header[0].value == "Requests"
    query = dict(at.query_params)
    assert query["where"] == f"tenant:{name}"
    assert query["since"] == bucket
    assert at.subheader[0].value.startswith(f"{count:,} of ")


def test_a_chart_point_opens_its_requests(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "deadline_exhausted", "by": "entry_route"})
    shown = table(at)
    bucket = next(c for c in shown.columns if c.endswith("Z"))
    select_chart(at, "breakdown_chart", {"pick": [{"name": "all requests", "label": bucket}]})
    assert at.header[0].value == "Requests"
    query = dict(at.query_params)
    assert query["terminal"] == "stop_deadline"
    assert query["since"] == bucket
    assert "where" not in query
    # "other" keeps more values apart instead (a new session: no time range kept)
    at = _app(demo, monkeypatch)
    follow(at, "breakdown", {"figure": "requests", "by": "http_status", "top": "3"})
    shown = table(at)
    other = shown[shown["name"] == "other"].iloc[0]
    bucket = next(c for c in shown.columns if c.endswith("Z") and _n(other[c]) > 0)
    select_chart(at, "breakdown_chart", {"pick": [{"name": "other", "label": bucket}]})
    assert at.header[0].value == "Breakdown"
    assert at.selectbox(key="breakdown_top").value == 5  # the default: not in the URL
    at.run()  # the chart keeps its selection: applied once
    assert at.selectbox(key="breakdown_top").value == 5
    assert "top" not in at.query_params
    assert "other" not in set(table(at)["name"])


def test_the_explorer_s_where(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = connect(demo)
    at = _app(demo, monkeypatch)
    follow(at, "requests", {"where": "http_status:503"})
    want = len(_ids(model, RequestQuery(where_dimension="http_status", where_value="503")))
    assert 0 < want < 300
    assert at.subheader[0].value == f"{want:,} of 300 requests"
    assert "HTTP status `503`" in at.caption[0].value
    follow(at, "requests", {"where": "status:503"})
    assert any("`where=status:503`" in w.value for w in at.warning)
    assert at.subheader[0].value == "300 of 300 requests"


def test_the_what_if_inputs_live_in_the_url(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(demo, monkeypatch)
    query = {"max_attempts": "2", "fallback": "off", "budget": "on", "budget_pct": "20"}
    follow(at, "whatif", query)
    assert at.number_input(key="whatif_max_attempts").value == 2
    assert at.toggle(key="whatif_fallback").value is False
    assert at.toggle(key="whatif_budget_on").value is True
    assert at.slider(key="whatif_budget").value == 20
    assert dict(at.query_params) == query
    caption = at.caption[0].value
    at.number_input(key="whatif_max_backoff_ms").set_value(500).run()
    assert at.query_params["max_backoff_ms"] == "500"
    assert at.caption[0].value != caption
    follow(at, "whatif", {"max_attempts": "0", "fallback": "maybe"})
    warnings = [w.value for w in at.warning]
    assert any("`max_attempts=0`" in w for w in warnings)
    assert any("`fallback=maybe`" in w for w in warnings)
    assert at.toggle(key="whatif_fallback").value is True
