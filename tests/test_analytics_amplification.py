"""Amplification, receiver attempts, hidden and nested retries, and transport classification."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import Dimension, Filters, amplification, findings
from tests.recorder import MS, T0, Clock, Recorder
from tests.test_analytics_randomized import _generate


def _nested(rec: Recorder) -> None:
    """r1: harness 3 x transport 3 (9 receiver hits); r2: one harness attempt; r3: one harness
    attempt whose HTTP client (unmarked spans) resent once."""
    clock = Clock(T0)
    with rec.request(clock, tenant="acme", logical_request_id="r1") as req:
        for h in range(3):
            last = h == 2
            with req.attempt("primary", layer="harness") as outer:
                for t in range(3):
                    ok = last and t == 2
                    rec.attempt(
                        req,
                        "primary",
                        layer="transport",
                        ms=10,
                        outcome="success" if ok else "unavailable",
                    )
                outer.set_outcome("success" if last else "unavailable")
            clock.advance_ms(100)
    clock = Clock(T0 + 60_000 * MS)
    with rec.request(clock, tenant="globex", logical_request_id="r2") as req:
        rec.attempt(req, "primary", ms=200)
    clock = Clock(T0 + 2 * 60_000 * MS)
    with (
        rec.request(clock, tenant="globex", logical_request_id="r3") as req,
        req.attempt("secondary", layer="harness"),
    ):
        with rec.http_span(clock, 503):
            pass
        clock.advance_ms(5)
        with rec.http_span(clock, 200):
            pass


def test_amplification_overall_counts_receiver_attempts_and_nesting(recorder: Recorder) -> None:
    _nested(recorder)
    con = recorder.connect()
    row = amplification(con).to_pylist()
    assert row == [
        {
            "value": "all",
            "logical_requests": 3,
            "physical_attempts": 16,  # 3 + 9, 1, 1 + 2 classified HTTP sends
            "harness_attempts": 5,
            "receiver_attempts": 12,  # 9 + 1 + 2
            "operations": 3,  # one per request: r3's two sends repeat one request
            "sends_per_request": 4.0,
            "amplification_ratio": 4.0,
            "attempts_per_request": 16 / 3,
            "excess_attempts": 9,  # 12 receiver attempts beyond one per operation
            "hidden_attempts": 7,
            "max_attempts_per_request": 9,
            "p99_attempts_per_request": 9,
            "nested_retry_requests": 1,
            "max_nested_multiplication": 9,
        }
    ]


def test_amplification_sliced_by_route_layer_tenant_and_bucket(recorder: Recorder) -> None:
    _nested(recorder)
    con = recorder.connect()
    by_route = {
        r["value"]: (r["logical_requests"], r["receiver_attempts"], r["amplification_ratio"])
        for r in amplification(con, by=Dimension.ROUTE).to_pylist()
    }
    assert by_route == {"primary": (2, 10, 5.0), "secondary": (1, 2, 2.0)}
    by_layer = {
        r["value"]: (r["physical_attempts"], r["receiver_attempts"])
        for r in amplification(con, by="layer").to_pylist()
    }
    assert by_layer == {"harness": (5, 1), "transport": (11, 11)}
    by_tenant = {
        r["value"]: r["receiver_attempts"] for r in amplification(con, by="tenant").to_pylist()
    }
    assert by_tenant == {"acme": 9, "globex": 3}
    buckets = amplification(con, by="time_bucket").column("value").to_pylist()
    assert buckets == ["2026-09-21T14:00:00Z"]  # T0 is 14:13:20Z


def test_a_slice_is_computed_once_per_scope(recorder: Recorder) -> None:
    """The report and the UI ask for the same slices: kept per scope, slice and bucket
    width, and never served to another scope."""
    from datetime import timedelta

    _nested(recorder)
    con = recorder.connect()
    whole = amplification(con, by="route")
    assert amplification(con, by=Dimension.ROUTE) is whole  # kept
    assert amplification(con, by="layer") is not whole
    hourly = amplification(con, by="time_bucket")
    assert amplification(con, by="time_bucket", bucket=timedelta(minutes=1)) is not hourly
    globex = amplification(con, by="route", filters=Filters(tenant="globex")).to_pylist()
    assert [(r["value"], r["logical_requests"]) for r in globex] == [
        ("primary", 1),
        ("secondary", 1),
    ]
    again = amplification(con, by="route")  # the unfiltered scope again: computed anew
    assert again is not whole
    assert again.equals(whole)


def test_filters_select_whole_requests(recorder: Recorder) -> None:
    _nested(recorder)
    con = recorder.connect()
    only_globex = amplification(con, filters=Filters(tenant="globex")).to_pylist()[0]
    assert (only_globex["logical_requests"], only_globex["receiver_attempts"]) == (2, 3)
    on_secondary = amplification(con, filters=Filters(route="secondary")).to_pylist()[0]
    assert on_secondary["logical_requests"] == 1
    from datetime import UTC, datetime

    since = datetime.fromtimestamp((T0 + 60_000 * MS) / 1e9, UTC)
    later = amplification(con, filters=Filters(since=since)).to_pylist()[0]
    assert later["logical_requests"] == 2
    until = amplification(con, filters=Filters(until=since)).to_pylist()[0]
    assert until["logical_requests"] == 1


def test_nested_retry_owner_finding_names_layers_and_product(recorder: Recorder) -> None:
    _nested(recorder)
    con = recorder.connect()
    rows = findings(con, rule="nested_retry_owners").to_pylist()
    assert [r["logical_request_id"] for r in rows] == ["r1"]
    assert rows[0]["severity"] == "warning"
    import json

    evidence = json.loads(rows[0]["evidence"])
    assert evidence == {
        "retried_layers": ["harness", "transport"],
        "multiplication": 9,
        "retry_owner": "harness",
    }


def test_unmarked_http_span_inside_marked_transport_attempt_is_not_counted_twice(
    recorder: Recorder,
) -> None:
    clock = Clock(T0)
    with (
        recorder.request(clock, logical_request_id="x") as req,
        req.attempt("primary", layer="harness"),
        req.attempt("primary", layer="transport"),
        recorder.http_span(clock, 200),
    ):
        pass
    con = recorder.connect()
    row = amplification(con).to_pylist()[0]
    assert (row["physical_attempts"], row["receiver_attempts"], row["hidden_attempts"]) == (
        2,
        1,
        0,
    )


def test_marked_transport_attempt_without_parent_fields_nests_by_span_tree(
    recorder: Recorder,
) -> None:
    """Should HTTP instrumentation mark its spans as transport attempts without naming the
    enclosing attempt, the span tree still nests them (no double counting)."""
    from opentelemetry import trace

    from retryscope import vocabulary as v

    clock = Clock(T0)
    with (
        recorder.request(clock, logical_request_id="m") as req,
        req.attempt("primary", layer="harness"),
    ):
        for status in (503, 200):
            span = recorder.tracer.start_span(
                "POST",
                kind=trace.SpanKind.CLIENT,
                start_time=clock(),
                attributes={
                    v.SPAN_ROLE.key: "attempt",
                    v.LAYER.key: "transport",
                    v.LOGICAL_REQUEST_ID.key: "m",
                    v.ROUTE_ID.key: "primary",
                    v.HTTP_METHOD.key: "POST",
                    v.HTTP_STATUS_CODE.key: status,
                    v.OUTCOME.key: "success" if status == 200 else "retryable",
                },
            )
            clock.advance_ms(10)
            span.end(end_time=clock())
    con = recorder.connect()
    row = amplification(con).to_pylist()[0]
    assert (row["physical_attempts"], row["receiver_attempts"], row["hidden_attempts"]) == (
        3,
        2,
        1,
    )
    assert findings(con, rule="nested_retry_owners").num_rows == 0


# Each request's attempts in each slice, straight from the attempts joined to their
# requests (the definition); the figures are then computed from these rows in Python.
PER_REQUEST = """
SELECT
    rs_dim($dim, a.route_id, a.route_release, r.tenant, r.operation, a.layer,
           r.started_at) AS value,
    count(a.span_id) AS attempts,
    count(a.span_id) FILTER (WHERE a.layer = 'harness') AS harness,
    count(a.span_id) FILTER (WHERE a.parent_layer IS NULL) AS top_level,
    count(a.span_id) FILTER (WHERE a.is_leaf) AS receiver,
    coalesce(max(coalesce(a.operation_ordinal, 1)) FILTER (WHERE a.is_leaf), 0) AS operations,
    count(a.span_id) FILTER (WHERE a.group_position > 1) AS repeats,
    count(a.span_id) FILTER (WHERE a.is_repeat) AS repeat_sends,
    any_value(coalesce(n.retried_layer_count, 0)) AS retried_layers,
    any_value(coalesce(n.multiplication, 1)) AS multiplication
FROM requests r
LEFT JOIN attempt_facts a ON a.logical_request_id = r.logical_request_id
LEFT JOIN request_nesting n ON n.h = r.h
GROUP BY 1, r.logical_request_id
"""


def _expected(
    rows: list[dict[str, Any]], *, layered: bool = False, routed: bool = False
) -> list[dict[str, Any]]:
    """amplification's columns per slice, from one row per request and slice (``layered``:
    the slices are layers; ``routed``: routes or releases)."""
    slices: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        slices.setdefault(row["value"], []).append(row)
    out = []
    for value in sorted(slices, key=lambda v: (v is None, v)):
        group = slices[value]
        receivers = sorted(r["receiver"] for r in group)
        nested = [r for r in group if r["retried_layers"] >= 2]
        operations = sum(r["operations"] for r in group)
        out.append(
            {
                "value": value,
                "logical_requests": len(group),
                "physical_attempts": sum(r["attempts"] for r in group),
                "harness_attempts": sum(r["harness"] for r in group),
                "receiver_attempts": sum(receivers),
                "operations": operations,
                "sends_per_request": sum(receivers) / len(group),
                "amplification_ratio": sum(receivers) / operations if operations else 0.0,
                "attempts_per_request": sum(r["attempts"] for r in group) / len(group),
                # per layer its attempts beyond the first of their retry group, per route
                # the sends there that repeat an operation, elsewhere the receiver
                # attempts beyond one per operation
                "excess_attempts": sum(
                    r["repeats"]
                    if layered
                    else r["repeat_sends"]
                    if routed
                    else max(0, r["receiver"] - r["operations"])
                    for r in group
                ),
                "hidden_attempts": sum(
                    max(
                        0,
                        r["receiver"]
                        - r["operations"] * (r["harness"] if r["harness"] > 0 else r["top_level"]),
                    )
                    for r in group
                ),
                "max_attempts_per_request": receivers[-1],
                # the 99th percentile, discrete: the smallest value with 99 % at or below it
                "p99_attempts_per_request": receivers[math.ceil(0.99 * len(receivers)) - 1],
                "nested_retry_requests": len(nested),
                "max_nested_multiplication": max((r["multiplication"] for r in nested), default=0),
            }
        )
    return out


def test_every_slice_equals_the_attempts_joined_to_their_requests(tmp_path: Path) -> None:
    """amplification reads request_facts, request_layers or the attempts depending on the
    slice; every slice, with and without filters, equals the definition above, including
    requests that made no attempt at all (the slice of NULL per route, release or layer)."""
    rec = Recorder(tmp_path / "data")
    _generate(rec, 400, seed=11)
    for i in range(3):  # requests that never dispatched
        with rec.request(Clock(T0 + i * 5000 * MS), tenant="a", operation="embed"):
            pass
    con = rec.connect()
    scopes = (None, Filters(tenant="b"), Filters(route="fallback"), Filters(operation="embed"))
    for scope in scopes:
        for dim in Dimension:
            fast = amplification(con, by=dim, filters=scope, bucket=timedelta(seconds=5))
            per_request = con.sql(PER_REQUEST, params={"dim": dim.value}).to_arrow_table()
            expected = _expected(
                per_request.to_pylist(),
                layered=dim is Dimension.LAYER,
                routed=dim in (Dimension.ROUTE, Dimension.ROUTE_RELEASE),
            )
            assert fast.num_rows >= 1, (scope, dim)
            got = fast.to_pylist()
            assert [r["value"] for r in got] == [r["value"] for r in expected], (scope, dim)
            for row, want in zip(got, expected, strict=True):
                assert row == pytest.approx(want), (scope, dim, row["value"])
        # the slices' excess attempts add up to the scope's, whichever the dimension
        total = amplification(con, filters=scope).to_pylist()[0]["excess_attempts"]
        for dim in (Dimension.ROUTE, Dimension.ROUTE_RELEASE, Dimension.LAYER, Dimension.TENANT):
            sliced = amplification(con, by=dim, filters=scope).to_pylist()
            assert sum(r["excess_attempts"] for r in sliced) == total, (scope, dim)
    for dim in (Dimension.ROUTE, Dimension.LAYER):
        rows = {r["value"]: r for r in amplification(con, by=dim).to_pylist()}
        assert (rows[None]["logical_requests"], rows[None]["physical_attempts"]) == (3, 0)
