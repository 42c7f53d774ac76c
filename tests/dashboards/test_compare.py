"""Compare: a slice of the requests in scope against the others, every dimension ranked by
how the slice differs, a value listing its requests, one of them opening its drill-down —
the figures checked against the explorer's rows (the model's) over the demo data."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics import (
    COMPARE_DIMENSIONS,
    RequestQuery,
    compare,
    compare_requests,
    connect,
    request_list,
)
from retryscope.demo._run import generate
from tests.dashboards.conftest import follow, links, select_row, table
from tests.ui_fixture import HOSTILE_TENANT, PERIOD


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "spans"
    generate(out, 300, 7, progress=False)
    return out


def test_the_shares_are_the_explorers_requests(demo: Path) -> None:
    """Per request-level dimension, the slice's and the baseline's requests taking a value
    are those the explorer lists with and without the slice's flag; the ranking puts the
    largest difference first; why the demo's fallbacks fired: 81 after a 503, 15 after a
    400."""
    model, _ = connect(demo)
    everything = {
        r["logical_request_id"]: r
        for r in request_list(model, RequestQuery(limit=10_000))[1].to_pylist()
    }
    fell_back = {
        r["logical_request_id"]
        for r in request_list(model, RequestQuery(fallback=True, limit=10_000))[1].to_pylist()
    }
    rows = compare(model, RequestQuery(fallback=True)).to_pylist()
    assert {r["dimension"] for r in rows} == set(COMPARE_DIMENSIONS)
    assert {(r["selected"], r["baseline"]) for r in rows} == {
        (len(fell_back), len(everything) - len(fell_back))
    }
    for dimension in ("tenant", "terminal", "operation"):
        got = {r["value"]: (r["selected_requests"], r["baseline_requests"]) for r in rows
               if r["dimension"] == dimension}  # fmt: skip
        inside = Counter(everything[i][dimension] for i in fell_back)
        outside = Counter(v[dimension] for i, v in everything.items() if i not in fell_back)
        assert got == {v: (inside[v], outside[v]) for v in inside | outside}, dimension
    for r in rows:
        assert r["difference"] == pytest.approx(r["selected_share"] - r["baseline_share"])
    spread = [abs(r["difference"]) for r in rows]
    assert spread[0] == max(spread)
    trigger = {r["value"]: r["selected_requests"] for r in rows
               if r["dimension"] == "fallback_trigger"}  # fmt: skip
    assert trigger == {"unavailable": 81, "invalid_request": 15}
    total, listed = compare_requests(
        model, RequestQuery(fallback=True), "fallback_trigger", "invalid_request", limit=5
    )
    assert (total, listed.num_rows) == (15, 5)
    assert set(listed.column("logical_request_id").to_pylist()) <= fell_back
    with pytest.raises(ValueError, match="no dimension"):
        compare_requests(model, RequestQuery(), "colour", "red")


@pytest.mark.parametrize("seed", [3, 23])
def test_a_slices_counts_are_its_requests_values(tmp_path: Path, seed: int) -> None:
    """A slice's counts (its requests' value keys, one row per request) are those of the
    rows of each request's value per dimension: random slices of a random demo run, each
    side of each value counted from those rows."""
    data = tmp_path / "spans"
    generate(data, 120, seed, progress=False)
    model, _ = connect(data)
    compare(model, RequestQuery(fallback=True))
    con = model.con
    reference = con.execute(
        "SELECT c.h, t.dimension, t.value FROM memo_compare_keys c, unnest(c.keys) AS u(k) "
        "JOIN memo_compare_totals t ON t.k = u.k"
    ).fetchall()
    totals = Counter((d, v) for _, d, v in reference)
    rng = random.Random(seed)
    flags = ("retried", "fallback", "deadline_missed", "nested", "wasted", "violations")
    for _ in range(6):
        query = RequestQuery(**{f: rng.choice([True, False]) for f in rng.sample(flags, 2)})
        picked = {
            h for (h,) in con.execute(
                "SELECT h FROM request_rows_matching($terminal, $rule, $layer, "
                "$min_receiver_attempts, $retried, $fallback, $deadline_missed, $nested, "
                "$wasted, $violations, $where_dimension, $where_value)",
                query.params(),
            ).fetchall()
        }  # fmt: skip
        inside = Counter((d, v) for h, d, v in reference if h in picked)
        got = {(r["dimension"], r["value"]): (r["selected_requests"], r["baseline_requests"])
               for r in compare(model, query).to_pylist()}  # fmt: skip
        assert got == {k: (inside[k], n - inside[k]) for k, n in totals.items()}, query


def test_a_time_slice_against_the_rest(demo: Path) -> None:
    model, _ = connect(demo)
    started = sorted(
        r["started_at"] for r in request_list(model, RequestQuery(limit=10_000))[1].to_pylist()
    )
    cut = started[len(started) // 2] + timedelta(microseconds=1)
    rows = compare(model, since=cut).to_pylist()
    later = sum(1 for t in started if t >= cut)
    assert {(r["selected"], r["baseline"]) for r in rows} == {(later, len(started) - later)}
    with pytest.raises(ValueError, match="start must be before"):
        compare(model, since=cut, until=cut)


def test_from_a_kpi_to_a_request_through_the_comparison(app: AppTest) -> None:
    # the Overview's Fallback rate card: its requests compared with the others
    fallback = next(
        q for label, (p, q) in _all_links(app) if p == "compare" and q.get("has") == "fallback"
    )
    follow(app, "compare", fallback)
    assert app.header[0].value == "Compare"
    assert "3 of 9 requests in scope, against the other 6" in app.caption[0].value
    ranked = table(app)
    routes = ranked[ranked["dimension_label"] == COMPARE_DIMENSIONS["route"]]
    assert set(routes["value"]) >= {"fb-cheap"}
    row = int(ranked.index[(ranked["value"] == "fb-cheap")][0])
    select_row(app, "compare_table", row)
    assert app.query_params["dim"] == "route"
    assert app.query_params["value"] == "fb-cheap"
    assert app.subheader[0].value.endswith(": 1")
    assert list(table(app, 1)["logical_request_id"]) == ["degraded"]
    select_row(app, "compare_requests_table", 0)
    assert app.header[0].value == "Request drill-down"
    assert app.query_params["id"] == "degraded"


def _all_links(at: AppTest) -> list[tuple[str, tuple[str, dict[str, str]]]]:
    from urllib.parse import parse_qs

    out = []
    for link in at.page_link:
        query = {k: v[-1] for k, v in parse_qs(link.proto.query_string).items()}
        out.append((link.proto.label, (link.proto.page, query)))
    return out


def test_a_value_of_a_filter_can_become_the_scope(app: AppTest) -> None:
    follow(app, "compare", {"has": "fallback", "dim": "tenant", "value": HOSTILE_TENANT})
    label = "Filter every page to this tenant"
    page, query = links(app)[label]
    assert (page, query["tenant"], query["has"]) == ("compare", HOSTILE_TENANT, "fallback")


def test_a_slice_of_everything_or_nothing_says_so(app: AppTest) -> None:
    follow(app, "compare", {})
    assert "nothing to compare" in app.info[0].value
    since, until = (t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in PERIOD)
    follow(app, "compare", {"from": since, "to": until})
    assert "7 of 9 requests in scope, against the other 2" in app.caption[0].value
    follow(app, "compare", {"from": until, "to": since})
    assert "time range is ignored" in app.error[0].value


def test_a_time_range_on_the_overview_compares_with_the_rest(app: AppTest) -> None:
    since, until = (t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in PERIOD)
    follow(app, "", {"since": since, "until": until, "tenant": "acme"})
    page, query = links(app)["Compare this time range with the rest"]
    assert (page, query) == ("compare", {"from": since, "to": until, "tenant": "acme"})
    follow(app, "compare", query)
    assert app.caption[0].value.startswith(f"Slice: All requests, started `{since}` – `{until}`")


def test_the_fallbacks_page_says_why_fallbacks_fired(app: AppTest) -> None:
    follow(app, "fallbacks", {})
    assert "Why fallbacks fired" in [s.value for s in app.subheader]
    triggers = table(app, 1)
    assert list(zip(triggers["value"], triggers["selected_requests"], strict=True)) == [
        ("unavailable", 3)
    ]
    select_row(app, "fallback_triggers", 0)
    assert app.header[0].value == "Compare"
    assert dict(app.query_params) == {
        "has": "fallback",
        "dim": "fallback_trigger",
        "value": "unavailable",
    }
    assert list(table(app, 1)["logical_request_id"]) == ["mismatch", "degraded", "widening"]
