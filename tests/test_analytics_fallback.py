"""Fallback rate, success, quality, degraded and boundary widening; their findings."""

from __future__ import annotations

import json
from typing import Any

from retryscope import vocabulary as v
from retryscope.analytics import class_names, fallback, finding_counts, findings
from tests.recorder import MS, T0, Clock, Recorder

CAP, BEHAVIOR = "cap-1", "incident-severity@v3"
REQUIRED = {
    v.REQUIRED_CAPABILITY_DIGEST.key: CAP,
    v.REQUIRED_BEHAVIOR_CLASS.key: BEHAVIOR,
    v.MAX_DATA_BOUNDARY.key: "private_service",
}


def _route(
    cap: str = CAP, behavior: str = BEHAVIOR, boundary: str = "private_service"
) -> dict[str, Any]:
    return {
        v.ROUTE_CAPABILITY_DIGEST.key: cap,
        v.ROUTE_BEHAVIOR_CLASS.key: behavior,
        v.ROUTE_DATA_BOUNDARY.key: boundary,
    }


def _fixture(rec: Recorder) -> None:
    fallbacks = {
        "good": (_route(), "success"),
        "degraded": (_route(behavior="cheaper@v1"), "success"),
        "external": (_route(boundary="external_provider"), "success"),
        "failing": (_route(), "unavailable"),
        "mismatch": (_route(cap="cap-2"), "success"),
    }
    for i, (name, (attrs, outcome)) in enumerate(fallbacks.items()):
        clock = Clock(T0 + i * 10_000 * MS)
        with rec.request(clock, logical_request_id=name, attributes=REQUIRED) as req:
            rec.attempt(req, "primary", outcome="unavailable", attributes=_route(), gap_ms=200)
            rec.attempt(req, f"fb-{name}", priority=1, outcome=outcome, attributes=attrs)
    clock = Clock(T0 + 99_000 * MS)
    with rec.request(clock, logical_request_id="no-fallback", attributes=REQUIRED) as req:
        rec.attempt(req, "primary", attributes=_route())


def test_fallback_metrics(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()
    assert fallback(con).to_pylist() == [
        {
            "value": "all",
            "logical_requests": 6,
            "requests_with_fallback": 5,
            "fallback_rate": 5 / 6,
            "fallback_successes": 4,
            "fallback_success_rate": 0.8,
            "quality_fallback_successes": 1,
            "fallback_quality": 0.25,
            "degraded_fallbacks": 1,
            "unverified_fallbacks": 0,
            "boundary_widened_requests": 1,
        }
    ]
    by_route = {
        r["value"]: r["requests_with_fallback"] for r in fallback(con, by="route").to_pylist()
    }
    assert by_route == {"primary": 5}  # request level: sliced by entry route


def test_fallback_without_compatibility_data_is_unverified(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock) as req:
        recorder.attempt(req, "primary", outcome="unavailable")
        recorder.attempt(req, "fb", priority=1)
    con = recorder.connect()
    row = fallback(con).to_pylist()[0]
    assert (row["fallback_successes"], row["unverified_fallbacks"], row["fallback_quality"]) == (
        1,
        1,
        0.0,
    )
    # what cannot be checked is neither incompatible nor degraded
    counts = finding_counts(con)
    assert counts["fallback_capability_mismatch"] == counts["degraded_fallback"] == 0


def test_an_unknown_capability_is_not_a_degraded_fallback(recorder: Recorder) -> None:
    """Another behavior class within the boundary, but no capability digest to compare:
    unverified, as the fallback metric counts it, so no degraded_fallback finding."""
    required = {k: val for k, val in REQUIRED.items() if k != v.REQUIRED_CAPABILITY_DIGEST.key}
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="unknown-cap", attributes=required) as req:
        recorder.attempt(req, "primary", outcome="unavailable", attributes=_route())
        recorder.attempt(req, "fb", priority=1, attributes=_route(behavior="cheaper@v1"))
    con = recorder.connect()
    row = fallback(con).to_pylist()[0]
    assert (row["unverified_fallbacks"], row["degraded_fallbacks"]) == (1, 0)
    counts = finding_counts(con)
    assert counts["fallback_capability_mismatch"] == counts["degraded_fallback"] == 0


def test_fallback_findings(recorder: Recorder) -> None:
    _fixture(recorder)
    con = recorder.connect()

    def ids(rule: str) -> list[tuple[str, str, dict[str, Any]]]:
        return [
            (r["logical_request_id"], r["severity"], json.loads(r["evidence"]))
            for r in findings(con, rule=rule).to_pylist()
        ]

    assert ids("fallback_boundary_widening") == [
        (
            "external",
            "error",
            {
                "route_id": "fb-external",
                "route_data_boundary": "external_provider",
                "allowed_boundary": "private_service",
                "is_fallback": True,
            },
        )
    ]
    assert ids("degraded_fallback") == [
        (
            "degraded",
            "info",
            {
                "route_id": "fb-degraded",
                "route_behavior_class": "cheaper@v1",
                "required_behavior_class": BEHAVIOR,
            },
        )
    ]
    assert [i for i, _, _ in ids("fallback_capability_mismatch")] == ["mismatch"]


def test_class_names_land_in_their_columns_and_name_the_classes(recorder: Recorder) -> None:
    """A name recorded beside a class lands in its column and names the class across the
    data set; the rules still compare the classes (the figures of test_fallback_metrics)."""
    _fixture(recorder)
    required = {
        **REQUIRED,
        v.REQUIRED_CAPABILITY_NAME.key: "incident-severity/json",
        v.REQUIRED_BEHAVIOR_CLASS_NAME.key: "Incident severity v3",
    }
    route = {
        **_route(cap="cap-2", behavior="cheaper@v1"),
        v.ROUTE_CAPABILITY_NAME.key: "chat/free-text",
        v.ROUTE_BEHAVIOR_CLASS_NAME.key: "Cheaper v1",
    }
    clock = Clock(T0 + 200_000 * MS)
    with recorder.request(clock, logical_request_id="named", attributes=required) as req:
        recorder.attempt(req, "primary", outcome="unavailable", attributes=_route())
        recorder.attempt(req, "fb-named", priority=1, attributes=route)
    con = recorder.connect()
    names = ", ".join(
        a.column
        for a in (
            v.REQUIRED_CAPABILITY_NAME,
            v.REQUIRED_BEHAVIOR_CLASS_NAME,
            v.ROUTE_CAPABILITY_NAME,
            v.ROUTE_BEHAVIOR_CLASS_NAME,
        )
    )
    rows = (
        con.build()
        .con.execute(
            f"SELECT {names} FROM spans WHERE logical_request_id = 'named' "
            f"AND coalesce({names}) IS NOT NULL ORDER BY span_role"
        )
        .fetchall()
    )
    assert rows == [
        (None, None, "chat/free-text", "Cheaper v1"),  # the fallback attempt
        ("incident-severity/json", "Incident severity v3", None, None),  # the request
    ]
    assert class_names(con) == {
        CAP: "incident-severity/json",
        BEHAVIOR: "Incident severity v3",
        "cap-2": "chat/free-text",
        "cheaper@v1": "Cheaper v1",
    }
    # the rules compare the classes: one more incompatible fallback, nothing else moves
    row = fallback(con).to_pylist()[0]
    assert (row["requests_with_fallback"], row["quality_fallback_successes"]) == (6, 1)
    assert finding_counts(con)["fallback_capability_mismatch"] == 2
