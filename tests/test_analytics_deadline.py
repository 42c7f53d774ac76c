"""Deadline exhaustion, late success, misses, doomed dispatch, latency percentiles."""

from __future__ import annotations

import json

import duckdb
import pytest

from retryscope.analytics import deadline, findings, latency, request_attempts
from retryscope.analytics.replay import WhatIf, whatif, whatif_requests
from tests.recorder import MS, T0, Clock, Recorder


def _fixture(rec: Recorder) -> None:
    # d1: retry dispatched with 300 ms left (route median 400 ms), succeeds 400 ms late
    clock = Clock(T0)
    with rec.request(clock, logical_request_id="d1", deadline=T0 + 1000 * MS) as req:
        rec.attempt(req, "r", ms=400, outcome="unavailable", gap_ms=300)
        rec.attempt(req, "r", ms=700)
    # d2: in time
    clock = Clock(T0 + 10_000 * MS)
    with rec.request(clock, logical_request_id="d2", deadline=clock.now + 5000 * MS) as req:
        rec.attempt(req, "r", ms=300)
    # d3: the deadline passes during the backoff: the owner stops
    clock = Clock(T0 + 20_000 * MS)
    with rec.request(clock, logical_request_id="d3", deadline=clock.now + 1000 * MS) as req:
        rec.attempt(req, "r", ms=600, outcome="unavailable", gap_ms=500)
        req.set_terminal("stop_deadline")
    # d4: no deadline
    clock = Clock(T0 + 30_000 * MS)
    with rec.request(clock, logical_request_id="d4") as req:
        rec.attempt(req, "r", ms=200)


def test_deadline_metrics(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()
    assert deadline(con).to_pylist() == [
        {
            "value": "all",
            "logical_requests": 4,
            "requests_with_deadline": 3,
            "deadline_exhausted": 2,
            "deadline_exhausted_rate": 0.5,
            "late_successes": 1,
            "deadline_misses": 2,
            "deadline_miss_rate": 2 / 3,
            "doomed_dispatches": 1,
        }
    ]


def test_latency_percentiles(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()
    row = latency(con).to_pylist()[0]
    # logical: 1400, 300, 1100, 200 ms; first attempts: 400, 300, 600, 200 ms
    assert row == {
        "value": "all",
        "logical_requests": 4,
        "logical_p50_ms": pytest.approx(700.0),
        "logical_p95_ms": pytest.approx(1355.0),
        "logical_p99_ms": pytest.approx(1391.0),
        "first_attempt_p50_ms": pytest.approx(350.0),
        "first_attempt_p95_ms": pytest.approx(570.0),
        "first_attempt_p99_ms": pytest.approx(594.0),
        "retry_tail_p99_ms": pytest.approx(797.0),
    }


def _evidence(con: duckdb.DuckDBPyConnection, rule: str) -> list[tuple[str, object]]:
    """The findings of ``rule``: each request id with its evidence."""
    rows = findings(con, rule=rule).to_pylist()
    return [(r["logical_request_id"], json.loads(r["evidence"])) for r in rows]


def _doomed(request_id: str, route: str, left_ms: int, p50_ms: float) -> tuple[str, object]:
    """A doomed dispatch's finding on a harness attempt: its request id and evidence."""
    evidence = {
        "route_id": route,
        "layer": "harness",
        "deadline_remaining_ms": left_ms,
        "route_p50_ms": p50_ms,
    }
    return (request_id, evidence)


def test_deadline_findings(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()
    assert _evidence(con, "late_success") == [
        ("d1", {"route_id": "r", "layer": "harness", "late_ms": 400.0})
    ]
    assert _evidence(con, "doomed_dispatch") == [_doomed("d1", "r", 300, 400.0)]


def test_a_dispatch_is_doomed_only_with_less_time_left_than_its_route_median(
    recorder: Recorder,
) -> None:
    """Route b's attempts all take 400 ms, its median: an attempt dispatched with 400 ms
    left is not doomed, one with 399 ms left is, in the findings and the figure alike."""
    for i, left_ms in enumerate((400, 399, None)):
        clock = Clock(T0 + i * 10_000 * MS)
        until = None if left_ms is None else clock.now + left_ms * MS
        with recorder.request(clock, logical_request_id=f"e{i}", deadline=until) as req:
            recorder.attempt(req, "b", ms=400)
    con = recorder.connect()
    assert _evidence(con, "doomed_dispatch") == [_doomed("e1", "b", 399, 400.0)]
    assert deadline(con).to_pylist()[0]["doomed_dispatches"] == 1


def test_the_whatif_records_the_reports_deadline_misses(recorder: Recorder) -> None:
    """A success ending exactly at its deadline is late (the deadline wins a tie), and a
    request ending after its deadline misses it though nothing stopped it: the report and
    the what-if's recorded (and, replayed as recorded, replayed) figures count both."""
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="t1", deadline=T0 + 500 * MS) as req:
        recorder.attempt(req, "r", ms=500)
    clock = Clock(T0 + 10_000 * MS)
    with recorder.request(clock, logical_request_id="t2", deadline=clock.now + 500 * MS) as req:
        recorder.attempt(req, "r", ms=600, outcome="unavailable")
        req.set_terminal("stop_route_exhausted")
    clock = Clock(T0 + 20_000 * MS)
    with recorder.request(clock, logical_request_id="t3", deadline=clock.now + 500 * MS) as req:
        recorder.attempt(req, "r", ms=499)
    con = recorder.connect()
    assert deadline(con).to_pylist()[0]["deadline_misses"] == 2
    rows = whatif_requests(con, WhatIf()).to_pylist()
    assert {r["logical_request_id"]: r["recorded_deadline_miss"] for r in rows} == {
        "t1": True,
        "t2": True,
        "t3": False,
    }
    assert [r["replayed_deadline_miss"] for r in rows] == [True, True, False]
    summary = {r["metric"]: r for r in whatif(con, WhatIf()).to_pylist()}["deadline_misses"]
    assert (summary["recorded"], summary["replayed_low"], summary["replayed_high"]) == (2, 2, 2)
    # the drill-down marks the late success as the figures count it
    late = {i: request_attempts(con, i).column("late_success").to_pylist() for i in ("t1", "t3")}
    assert late == {"t1": [True], "t3": [False]}


def test_findings_of_several_rules_and_a_limit(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()
    both = findings(con, rules=["late_success", "doomed_dispatch"]).to_pylist()
    everything = findings(con).to_pylist()
    assert sorted(r["rule_id"] for r in both) == ["doomed_dispatch", "late_success"]
    assert both == [r for r in everything if r["rule_id"] in {"late_success", "doomed_dispatch"}]
    assert findings(con, rules=["late_success", "doomed_dispatch"], limit=1).to_pylist() == [
        both[0]
    ]
    assert findings(con, rules=[]).num_rows == 0
    with pytest.raises(ValueError, match="unknown rule 'no_such_rule'"):
        findings(con, rules=["late_success", "no_such_rule"])
    with pytest.raises(ValueError, match="limit must not be negative"):
        findings(con, limit=-1)
