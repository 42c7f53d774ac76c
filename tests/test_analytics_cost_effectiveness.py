"""Cost, wasted cost, retry effectiveness and ineffective retries on exact fixtures."""

from __future__ import annotations

from retryscope.analytics import (
    Thresholds,
    cost,
    ineffective_retries,
    retry_effectiveness,
    wasted_cost,
)
from tests.recorder import MS, T0, Clock, Recorder


def _costs(recorder: Recorder) -> None:
    """Three attempts: an estimated cost, a wasted one, an accepted one."""
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="c1") as req:
        # timeout: usage unknown, the 1000 reservation stands (estimated)
        recorder.attempt(req, "p", outcome="timeout_before_response", reserved=1000)
        recorder.attempt(req, "p", outcome="rate_limited", reserved=1000, actual=200)
        recorder.attempt(req, "p", outcome="success", reserved=1000, actual=700)


def test_cost_totals_accepted_wasted_estimated(recorder: Recorder) -> None:
    _costs(recorder)
    con = recorder.connect()
    assert cost(con).to_pylist() == [
        {
            "value": "all",
            "currency": "USD",
            "total_micros": 1900,
            "accepted_micros": 700,
            "cost_amplification": 1900 / 700,
            "wasted_micros": 1200,
            "estimated_micros": 1000,
            "measured_micros": 900,
            "estimated_attempts": 1,
            "measured_attempts": 2,
        }
    ]
    wasted = {
        (r["route_id"], r["outcome_kind"]): r["wasted_micros"] for r in wasted_cost(con).to_pylist()
    }
    assert wasted == {("p", "timeout_before_response"): 1000, ("p", "rate_limited"): 200}


def _effectiveness_fixture(rec: Recorder) -> None:
    """4 requests retry after rate_limited (3 succeed at ordinal 2); 3 retry after
    unavailable on route `dead`, all fail at ordinal 2 and succeed at ordinal 3."""
    for i in range(4):
        clock = Clock(T0 + i * 10_000 * MS)
        with rec.request(clock) as req:
            rec.attempt(req, "p", outcome="rate_limited", gap_ms=100)
            rec.attempt(req, "p", outcome="success" if i < 3 else "unavailable", gap_ms=100)
    for i in range(3):
        clock = Clock(T0 + (50 + i) * 10_000 * MS)
        with rec.request(clock) as req:
            rec.attempt(req, "dead", outcome="unavailable", gap_ms=100)
            rec.attempt(req, "dead", outcome="unavailable", gap_ms=100)
            rec.attempt(req, "dead", outcome="success")


def test_retry_effectiveness_by_kind_and_ordinal(recorder: Recorder) -> None:
    _effectiveness_fixture(recorder)
    con = recorder.connect()
    rows = retry_effectiveness(con).to_pylist()
    by_kind = {
        r["after_kind"]: (r["retries"], r["successes"], r["success_rate"])
        for r in rows
        if r["slice"] == "after_kind"
    }
    assert by_kind == {"rate_limited": (4, 3, 0.75), "unavailable": (6, 3, 0.5)}
    by_ordinal = {
        r["attempt_ordinal"]: (r["retries"], r["successes"])
        for r in rows
        if r["slice"] == "ordinal"
    }
    assert by_ordinal == {2: (7, 3), 3: (3, 3)}
    assert {r["layer"] for r in rows} == {"harness"}


def test_ineffective_retries_are_the_ones_that_never_succeed(recorder: Recorder) -> None:
    _effectiveness_fixture(recorder)
    con = recorder.connect()
    found = ineffective_retries(
        con, thresholds=Thresholds(ineffective_min_samples=3, ineffective_max_success_rate=0.0)
    ).to_pylist()
    assert [
        (r["route_id"], r["after_kind"], r["attempt_ordinal"], r["retries"], r["successes"])
        for r in found
    ] == [("dead", "unavailable", 2, 3, 0)]
    assert ineffective_retries(con).num_rows == 0  # default needs 20 samples


def test_retry_effectiveness_sliced_by_route(recorder: Recorder) -> None:
    _effectiveness_fixture(recorder)
    con = recorder.connect()
    rows = retry_effectiveness(con, by="route").to_pylist()
    by_route_kind = {
        (r["value"], r["after_kind"]): (r["retries"], r["successes"])
        for r in rows
        if r["slice"] == "after_kind"
    }
    assert by_route_kind == {("p", "rate_limited"): (4, 3), ("dead", "unavailable"): (6, 3)}
    by_route_ordinal = {
        (r["value"], r["attempt_ordinal"]): (r["retries"], r["successes"])
        for r in rows
        if r["slice"] == "ordinal"
    }
    assert by_route_ordinal == {("p", 2): (4, 3), ("dead", 2): (3, 0), ("dead", 3): (3, 3)}
    overall = retry_effectiveness(con).to_pylist()
    assert {r["value"] for r in overall} == {"all"}
