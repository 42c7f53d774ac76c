"""What-if page: the replay's figures under policies set through the widgets, over the known
data set (tests/ui_fixture.py) and over one with policy side files (policy drift panel)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics._figures import fingerprint
from retryscope.analytics.replay._policy_drift import write_policy_side_file
from tests import ui_fixture
from tests.dashboards.conftest import (
    charts,
    metrics,
    open_page,
    select,
    start_app,
    type_text,
)
from tests.ui_fixture import HOSTILE_TENANT, POLICY_REQUESTS
from tests.whatif.harness import policy_with


def _set(at: AppTest, kind: str, key: str, value: object) -> AppTest:
    getattr(at, kind)(key=key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _figures(at: AppTest) -> dict[str, str]:
    return {k: v for k, v in metrics(at).items() if k.endswith("(est.)")}


def _tables(at: AppTest) -> list[object]:
    return [d.value for d in at.dataframe]


def _comparison(at: AppTest) -> dict[tuple[str, str], float]:
    (data,) = (d for _, d in charts(at))
    (table,) = data.values()
    return {(r["metric"], r["series"]): r["value"] for r in table.to_pylist()}


@pytest.fixture
def whatif(app: AppTest) -> AppTest:
    return open_page(app, "whatif")


def test_as_recorded_the_replay_changes_nothing(whatif: AppTest) -> None:
    assert _figures(whatif) == {
        "Retry-owner attempts (est.)": "15",  # nested: its 3 harness attempts
        "Cost (est.)": "$0.002",  # ok1's (deadline's cost is its sends', below the owner)
        "Successes incl. late (est.)": "9",
        "Success rate incl. late (est.)": "100.0%",
        "Deadline misses (est.)": "1",
    }
    assert "as recorded" in whatif.caption[0].value
    assert "changes no request" in whatif.success[0].value
    assert "no retry policy" in whatif.info[0].value


def test_fewer_attempts_cuts_every_retry_and_lists_the_requests(whatif: AppTest) -> None:
    _set(whatif, "number_input", "whatif_max_attempts", 1)
    assert _figures(whatif) == {
        "Retry-owner attempts (est.)": "9",
        "Cost (est.)": "$0.002",
        "Successes incl. late (est.)": "4",
        "Success rate incl. late (est.)": "44.4%",
        "Deadline misses (est.)": "0",  # `deadline` now stops before its deadline
    }
    deltas = {m.label: m.delta for m in whatif.metric}
    assert deltas["Retry-owner attempts (est.)"] == "-6 vs 15 recorded"
    assert (
        deltas["Success rate incl. late (est.)"] == "-55.6 pp vs 100.0% recorded"
    )  # points, not %
    assert _comparison(whatif) == {
        ("Retry-owner attempts", "recorded"): 15,
        ("Retry-owner attempts", "replayed (low)"): 9,
        ("Retry-owner attempts", "replayed (high)"): 9,
        ("Cost (USD)", "recorded"): 0.002,  # in dollars, not micro-units
        ("Cost (USD)", "replayed (low)"): 0.002,
        ("Cost (USD)", "replayed (high)"): 0.002,
        ("Successes incl. late", "recorded"): 9,
        ("Successes incl. late", "replayed (low)"): 4,
        ("Successes incl. late", "replayed (high)"): 4,
        ("Deadline misses", "recorded"): 1,
        ("Deadline misses", "replayed (low)"): 0,
        ("Deadline misses", "replayed (high)"): 0,
    }
    summary, affected = _tables(whatif)
    figures = {r["Figure"]: r for r in summary.to_dict("records")}
    assert figures["Retry-owner attempts"]["Replayed (low)"] == "9"
    assert figures["Success rate incl. late"]["Recorded"] == "100.0%"  # a rate in %, not 1.0
    assert figures["Cost"]["Recorded"] == "$0.002"
    assert whatif.subheader[1].value == "Most affected requests: 5"
    assert affected[["logical_request_id", "attempts_saved", "cut_by"]].to_dict("records")[:2] == [
        {"logical_request_id": "nested", "attempts_saved": 2, "cut_by": "attempts"},
        {"logical_request_id": "deadline", "attempts_saved": 1, "cut_by": "attempts"},
    ]
    assert set(affected["replayed_status"]) == {"failed"}


def test_no_fallback_and_retry_budget(whatif: AppTest) -> None:
    _set(whatif, "number_input", "whatif_max_attempts", 2)
    _set(whatif, "toggle", "whatif_fallback", False)
    assert "max_attempts=2, no_fallback" in whatif.caption[0].value
    shown = _figures(whatif)
    assert (shown["Retry-owner attempts (est.)"], shown["Successes incl. late (est.)"]) == (
        "11",
        "5",
    )
    _, affected = _tables(whatif)
    assert dict(zip(affected["logical_request_id"], affected["cut_by"], strict=True)) == {
        "degraded": "fallback",
        "mismatch": "fallback",
        "widening": "fallback",
        "nested": "attempts",
    }
    _set(whatif, "number_input", "whatif_max_attempts", None)
    _set(whatif, "toggle", "whatif_fallback", True)
    _set(whatif, "toggle", "whatif_budget_on", True)
    _set(whatif, "slider", "whatif_budget", 20)
    # one 60 s window per request here: floor(0.2 × 1 first attempt) = 0 retries admitted
    assert "retry_budget=0.2/60000ms" in whatif.caption[0].value
    shown = _figures(whatif)
    assert (shown["Retry-owner attempts (est.)"], shown["Successes incl. late (est.)"]) == (
        "9",
        "4",
    )
    _, affected = _tables(whatif)
    assert set(affected["cut_by"]) == {"budget"}


def test_lower_backoff_cap_is_marked_as_an_estimate(whatif: AppTest) -> None:
    _set(whatif, "number_input", "whatif_max_backoff_ms", 0)
    assert "1 request(s) succeed at a time the lower backoff cap moves" in whatif.info[0].value
    _, affected = _tables(whatif)
    assert affected[["logical_request_id", "shift_ms", "estimated"]].to_dict("records") == [
        {"logical_request_id": "nested", "shift_ms": 200, "estimated": True}
    ]


def test_hostile_tenant_filter_applies_to_the_replay(app: AppTest) -> None:
    select(app, "filter_tenant", HOSTILE_TENANT)
    open_page(app, "whatif")
    _set(app, "number_input", "whatif_max_attempts", 1)
    shown = _figures(app)
    assert (shown["Retry-owner attempts (est.)"], shown["Successes incl. late (est.)"]) == (
        "1",
        "0",
    )
    _, affected = _tables(app)
    assert list(affected["logical_request_id"]) == ["widening"]


def test_out_of_range_widget_values_are_not_replayed(whatif: AppTest) -> None:
    recorded = _figures(whatif)
    for key, value in (("whatif_max_attempts", 0), ("whatif_max_backoff_ms", -5)):
        whatif.session_state[key] = value
        whatif.run()
        assert not whatif.exception, [e.value for e in whatif.exception]
        assert whatif.number_input(key=key).value is None  # Streamlit refuses it
        assert "as recorded" in whatif.caption[0].value
        assert _figures(whatif) == recorded
    _set(whatif, "number_input", "whatif_max_attempts", -3)
    assert _figures(whatif) == recorded


def test_no_requests_in_scope_says_so(app: AppTest) -> None:
    type_text(app, "filter_since", "2030-01-01T00:00Z")
    open_page(app, "whatif")
    assert "No logical requests match the filters" in app.info[0].value
    assert not _figures(app)


def test_selecting_an_affected_request_opens_its_drill_down(whatif: AppTest) -> None:
    _set(whatif, "number_input", "whatif_max_attempts", 1)
    whatif.session_state["whatif_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    whatif.run()
    assert not whatif.exception
    assert whatif.header[0].value == "Request drill-down"
    assert whatif.query_params["id"] == "nested"


@pytest.fixture(scope="module")
def policy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ui_fixture.build_with_policies(tmp_path_factory.mktemp("ui-policies") / "spans")


@pytest.fixture
def policy_app(policy_data: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    return open_page(start_app(policy_data, monkeypatch), "whatif")


def test_more_attempts_than_recorded_shows_the_unknown_range(policy_app: AppTest) -> None:
    a, _, e, _ = POLICY_REQUESTS
    _set(policy_app, "number_input", "whatif_max_attempts", 4)
    assert _figures(policy_app) == {
        "Retry-owner attempts (est.)": "10 – 11",  # e: one more attempt at least, two at most
        "Cost (est.)": "$0.75",
        "Successes incl. late (est.)": "3 – 4",
        "Success rate incl. late (est.)": "75% – 100%",
        "Deadline misses (est.)": "0 – 1",
    }
    assert "1 request(s) would be retried beyond what was recorded" in policy_app.warning[0].value
    summary, affected, _ = _tables(policy_app)
    attempts = summary[summary["Figure"] == "Retry-owner attempts"].to_dict("records")
    assert attempts == [
        {
            "Figure": "Retry-owner attempts",
            "Recorded": "9",
            "Replayed (low)": "10",
            "Replayed (high)": "11",
        }
    ]
    assert affected[["logical_request_id", "replayed_status"]].to_dict("records") == [
        {"logical_request_id": e, "replayed_status": "unknown"}
    ]
    _set(policy_app, "toggle", "whatif_fallback", False)
    shown = _figures(policy_app)
    assert (shown["Cost (est.)"], shown["Retry-owner attempts (est.)"]) == ("$0.50", "9 – 10")
    _, affected, _ = _tables(policy_app)
    assert list(affected["logical_request_id"]) == [a, e]
    assert list(affected["cost_saved_micros"]) == ["$0.25", "$0.00"]


def test_policy_drift_panel_lists_the_drifting_request(policy_app: AppTest) -> None:
    d = POLICY_REQUESTS[3]
    assert policy_app.subheader[-1].value == "Policy drift"
    drift = _tables(policy_app)[-1]
    assert drift[["logical_request_id", "drift", "check", "field", "observed", "planned"]].to_dict(
        "records"
    ) == [
        {
            "logical_request_id": d,
            "drift": "route",
            "check": "RouteMismatch",
            "field": "route_id",
            "observed": '"rogue"',
            "planned": '"private-primary"',
        }
    ]
    policy_app.session_state["drift_table"] = {
        "selection": {"rows": [0], "columns": [], "cells": []}
    }
    policy_app.run()
    assert policy_app.header[0].value == "Request drill-down"
    assert policy_app.query_params["id"] == d


def test_a_new_policy_side_file_is_a_new_version(policy_data: Path, tmp_path: Path) -> None:
    before = fingerprint(str(policy_data))
    # the hand loop's side file (the controller's policies travel on its request spans)
    assert sum("_policies" in path for path, _, _ in before) == 1
    copy = tmp_path / "spans"
    shutil.copytree(policy_data, copy)
    write_policy_side_file(copy, policy_with(max_total_attempts=3))
    assert len(fingerprint(str(copy))) == len(before) + 1
    only_policies = tmp_path / "empty"
    write_policy_side_file(only_policies, policy_with(max_total_attempts=3))
    assert fingerprint(str(only_policies)) == ()  # no span files: nothing to show
