"""Retry budget windows, synchronized retries, hedging and breakers."""

from __future__ import annotations

import contextvars
import json

import pytest

from retryscope import vocabulary as v
from retryscope.analytics import (
    AuditModel,
    Filters,
    Thresholds,
    findings,
    hedging,
    load,
    synchronized_retries,
)
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS
from tests.recorder import T0, Clock, Recorder


def _storm(rec: Recorder) -> None:
    """Five requests fail together at +100 ms and all retry 1 ms apart at +300 ms (no
    jitter); a sixth retries alone 2 s later."""
    for i in range(6):
        clock = Clock(T0)
        with rec.request(clock, logical_request_id=f"s{i}") as req:
            rec.attempt(req, outcome="unavailable", gap_ms=200 + i if i < 5 else 2000)
            rec.attempt(req)


def test_synchronized_retries_cluster(recorder: Recorder) -> None:
    _storm(recorder)
    con = recorder.connect()
    clusters = synchronized_retries(con).to_pylist()
    assert len(clusters) == 1
    c = clusters[0]
    assert (c["retries"], c["logical_requests"], c["spread_ms"], c["after_kinds"]) == (
        5,
        5,
        4.0,
        ["unavailable"],
    )
    assert c["logical_request_ids"] == ["s0", "s1", "s2", "s3", "s4"]
    rows = findings(con, rule="synchronized_retries").to_pylist()
    assert sorted(r["logical_request_id"] for r in rows) == ["s0", "s1", "s2", "s3", "s4"]
    assert json.loads(rows[0]["evidence"]) == {
        "cluster_requests": 5,
        "cluster_retries": 5,
        "spread_ms": 4.0,
        "after_kinds": ["unavailable"],
    }
    assert synchronized_retries(con, thresholds=Thresholds(sync_min_requests=6)).num_rows == 0


def test_a_cluster_names_the_routes_and_kinds_of_retries_starting_together(
    recorder: Recorder,
) -> None:
    """Two retries of one request starting at the same instant (one ended at once, the
    next sent to another route) are both in the cluster, with both routes and both
    kinds they followed."""
    for i in range(5):
        clock = Clock(T0)
        with recorder.request(clock, logical_request_id=f"s{i}") as req:
            recorder.attempt(req, outcome="unavailable", gap_ms=200 + i)
            if i == 0:
                recorder.attempt(req, ms=0, outcome="rate_limited")
                recorder.attempt(req, "fallback")
            else:
                recorder.attempt(req)
    (c,) = synchronized_retries(recorder.connect()).to_pylist()
    assert (c["retries"], c["logical_requests"], c["spread_ms"]) == (6, 5, 4.0)
    assert (c["routes"], c["after_kinds"]) == (
        ["fallback", "primary"],
        ["rate_limited", "unavailable"],
    )


def test_clusters_kept_per_scope_and_thresholds_follow_both(recorder: Recorder) -> None:
    """The clusters are computed once per scope and thresholds (the report's figures and
    its findings share them); any change of either computes them again."""
    _storm(recorder)
    con = recorder.connect()
    wide = Thresholds(sync_gap_ms=5000, sync_min_requests=2)  # the lone sixth joins in

    def ids(thresholds: Thresholds = DEFAULT_THRESHOLDS, **filters: object) -> list[list[str]]:
        scope = Filters(**filters) if filters else None  # type: ignore[arg-type]
        got = [
            c["logical_request_ids"]
            for c in synchronized_retries(con, filters=scope, thresholds=thresholds).to_pylist()
        ]
        rows = findings(con, rule="synchronized_retries", filters=scope, thresholds=thresholds)
        assert sorted({r["logical_request_id"] for r in rows.to_pylist()}) == sorted(
            i for c in got for i in c
        )
        return got

    five = [["s0", "s1", "s2", "s3", "s4"]]
    assert ids() == five
    assert ids(wide) == [["s0", "s1", "s2", "s3", "s4", "s5"]]
    assert ids() == five
    assert ids(Thresholds(sync_min_requests=6)) == []
    assert ids(route="primary") == five
    assert ids(route="no-such-route") == []
    assert ids() == five


def test_retry_budget_windows(recorder: Recorder) -> None:
    _storm(recorder)
    con = recorder.connect()
    windows = load(con).to_pylist()
    assert [
        (w["attempts"], w["retries"], w["retry_fraction"], w["over_budget"]) for w in windows
    ] == [(12, 6, 0.5, True)]
    rows = findings(con, rule="retry_budget_exceeded").to_pylist()
    assert [(r["logical_request_id"], json.loads(r["evidence"])) for r in rows] == [
        (
            None,
            {
                "attempts": 12,
                "retries": 6,
                "retry_fraction": 0.5,
                "budget": 0.1,
                "min_retries": 3,
            },
        )
    ]
    relaxed = Thresholds(retry_budget=0.5)
    assert findings(con, rule="retry_budget_exceeded", thresholds=relaxed).num_rows == 0


def _retried_once(rec: Recorder, requests: int) -> None:
    """``requests`` requests in one window, each failing once and retried once."""
    for i in range(requests):
        with rec.request(Clock(T0), logical_request_id=f"r{i}") as req:
            rec.attempt(req, outcome="unavailable")
            rec.attempt(req)


def _storms(con: AuditModel, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[int, int]:
    """Storm windows as the load figures and as findings count them."""
    windows = load(con, thresholds=thresholds).column("over_budget").to_pylist()
    found = findings(con, rule="retry_budget_exceeded", thresholds=thresholds).num_rows
    return sum(windows), found


def test_one_request_retried_once_is_no_storm(recorder: Recorder) -> None:
    """2 sends of 1 operation are half the window's traffic, far above a 10 % budget, but
    one retry is within any retry budget's floor."""
    _retried_once(recorder, 1)
    con = recorder.connect()
    assert [(w["attempts"], w["retries"]) for w in load(con).to_pylist()] == [(2, 1)]
    assert _storms(con) == (0, 0)


def test_a_window_at_the_floor_of_repeats_is_no_storm(recorder: Recorder) -> None:
    """3 repeats (the default floor) in a window of 6 attempts: within the budget; the
    same window is a storm once the floor is one lower, and 4 repeats are one."""
    _retried_once(recorder, 3)
    con = recorder.connect()
    assert DEFAULT_THRESHOLDS.retry_budget_min_retries == 3
    assert _storms(con) == (0, 0)
    assert _storms(con, Thresholds(retry_budget_min_retries=2)) == (1, 1)


def test_a_window_one_repeat_above_the_floor_is_a_storm(recorder: Recorder) -> None:
    _retried_once(recorder, 4)
    con = recorder.connect()
    assert _storms(con) == (1, 1)
    assert _storms(con, Thresholds(retry_budget_min_retries=4)) == (0, 0)
    by_layer = load(con, by="layer").to_pylist()
    assert [(w["retries"], w["over_budget"]) for w in by_layer] == [(4, True)]
    floor_of_four = load(con, by="layer", thresholds=Thresholds(retry_budget_min_retries=4))
    assert floor_of_four.column("over_budget").to_pylist() == [False]


def test_the_floor_of_repeats_is_a_count() -> None:
    with pytest.raises(ValueError, match="retry_budget_min_retries"):
        Thresholds(retry_budget_min_retries=-1)


def _hedged(recorder: Recorder) -> None:
    """A cancelled hedge beside a completed attempt, a dispatch on an open breaker, an
    attempt whose SDK may retry on its own."""
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="hedged") as req:
        sibling = contextvars.copy_context()  # the hedge runs beside, not inside, attempt 1
        with req.attempt("p") as first:
            hedge = sibling.run(
                lambda: req.attempt("p", attributes={v.HEDGE_ORDINAL.key: 1}).__enter__()
            )
            clock.advance_ms(100)
            first.set_cost(reserved=500, actual=400)
            first.set_decision("complete")

            def cancel() -> None:
                hedge.set_cost(reserved=500, actual=300)
                hedge.set_attributes({v.HEDGE_RESULT.key: "cancelled"})
                hedge.__exit__(None, None, None)

            sibling.run(cancel)
    with recorder.request(clock, logical_request_id="breaker") as req:
        recorder.attempt(req, "sick", attributes={v.BREAKER_STATE.key: "open"})
    with recorder.request(clock, logical_request_id="opaque") as req:
        recorder.attempt(req, attributes={v.LOWER_MAX_RETRIES.key: 2})


def test_hedging_breakers_and_opaque_ownership(recorder: Recorder) -> None:
    _hedged(recorder)
    con = recorder.connect()
    assert hedging(con).to_pylist() == [
        {
            "value": "all",
            "logical_requests": 3,
            "hedged_requests": 1,
            "hedge_rate": 1 / 3,
            "hedge_attempts": 1,
            "cancelled_attempts": 1,
            "hedge_waste_micros": 300,
            "breaker_open_dispatches": 1,
            "opaque_ownership_requests": 1,
        }
    ]
    # a hedge is not a retry, and the cancelled loser is not an attempt after a terminal
    assert findings(con, rule="attempt_after_terminal").num_rows == 0
    assert findings(con, rule="nested_retry_owners").num_rows == 0


def test_hedging_sliced_counts_each_request_once_per_slice(recorder: Recorder) -> None:
    """Per route, a request counts once however many of its attempts the route took (the
    hedged request: two on route p); per operation, every request that made an attempt."""
    _hedged(recorder)
    con = recorder.connect()
    keys = ("value", "logical_requests", "hedged_requests", "hedge_attempts")
    keys += ("breaker_open_dispatches", "opaque_ownership_requests")
    by_route = [tuple(r[k] for k in keys) for r in hedging(con, by="route").to_pylist()]
    assert by_route == [
        ("p", 1, 1, 1, 0, 0),
        ("primary", 1, 0, 0, 0, 1),
        ("sick", 1, 0, 0, 1, 0),
    ]
    by_operation = [tuple(r[k] for k in keys) for r in hedging(con, by="operation").to_pylist()]
    assert by_operation == [("chat", 3, 1, 1, 1, 1)]
    assert hedging(con, by="operation").to_pylist()[0]["hedge_rate"] == 1 / 3


def test_retry_budget_windows_sliced_by_layer(recorder: Recorder) -> None:
    _storm(recorder)
    con = recorder.connect()
    assert [(w["value"], w["attempts"], w["retries"]) for w in load(con).to_pylist()] == [
        ("all", 12, 6)
    ]
    sliced = load(con, by="layer").to_pylist()
    assert [(w["value"], w["attempts"], w["retries"], w["over_budget"]) for w in sliced] == [
        ("harness", 12, 6, True)
    ]


def test_long_windows_and_gaps_do_not_overflow(recorder: Recorder) -> None:
    """Thresholds in ms are widened before they are scaled to µs or ns (an hour's window
    or a 5 s gap overflow 32-bit integers)."""
    _storm(recorder)
    con = recorder.connect()
    hour = load(con, thresholds=Thresholds(load_window_ms=3_600_000)).to_pylist()
    assert [(w["attempts"], w["retries"]) for w in hour] == [(12, 6)]
    wide = Thresholds(sync_gap_ms=10_000, sync_min_requests=6)
    assert [c["retries"] for c in synchronized_retries(con, thresholds=wide).to_pylist()] == [6]
