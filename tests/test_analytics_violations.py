"""Every protocol-violation and telemetry rule, one fixture each, with exact evidence."""

from __future__ import annotations

import json
from typing import Any

from retryscope import vocabulary as v
from retryscope.analytics import RULES, findings
from retryscope.instrumentation import LogicalRequest
from tests.recorder import MS, T0, Clock, Recorder


def _rows(recorder: Recorder, rule: str) -> list[tuple[str | None, str, dict[str, Any]]]:
    con = recorder.connect()
    return [
        (r["logical_request_id"], r["severity"], json.loads(r["evidence"]))
        for r in findings(con, rule=rule).to_pylist()
    ]


def _early_retry(recorder: Recorder) -> None:
    """A retry that went 200 ms before its not_before."""
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="nb") as req:
        recorder.attempt(req, outcome="rate_limited", gap_ms=50)
        with req.attempt("primary") as a:  # Retry-After said 250 ms; it went after 50
            a.set_backoff(delay_ms=50, retry_after_ms=250, not_before=clock.now + 200 * MS)
            clock.advance_ms(10)


def test_not_before_ignored(recorder: Recorder) -> None:
    _early_retry(recorder)
    assert _rows(recorder, "not_before_ignored") == [
        (
            "nb",
            "error",
            {
                "layer": "harness",
                "attempt_ordinal": 2,
                "route_id": "primary",
                "early_ms": 200.0,
                "backoff_delay_ms": 50,
                "retry_after_ms": 250,
            },
        )
    ]


def test_retry_after_non_retryable(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="nr") as req:
        recorder.attempt(req, outcome="invalid_request", decision="fallback")
        recorder.attempt(req, "fb", priority=1)
    assert _rows(recorder, "retry_after_non_retryable") == [
        (
            "nr",
            "error",
            {
                "layer": "harness",
                "attempt_ordinal": 2,
                "route_id": "fb",
                "previous_route_id": "primary",
                "previous_kind": "invalid_request",
                "previous_decision": "fallback",
            },
        )
    ]


def test_retry_after_indeterminate_needs_reconciliation(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="blind") as req:
        recorder.attempt(req, outcome="unknown_provider_acceptance", gap_ms=100)
        recorder.attempt(req)
    clock = Clock(T0 + 10_000 * MS)
    with recorder.request(clock, logical_request_id="reconciled") as req:
        recorder.attempt(req, outcome="unknown_provider_acceptance", gap_ms=50)
        req.span.add_event(
            v.RECONCILIATION_EVENT,
            {v.RECONCILIATION_RESULT.key: v.ReconciliationResult.NO_EFFECT.value},
            timestamp=clock.now,
        )
        clock.advance_ms(50)
        recorder.attempt(req)
    clock = Clock(T0 + 20_000 * MS)
    with recorder.request(
        clock,
        logical_request_id="reconciled-attr",
        attributes={v.RECONCILIATION_RESULT.key: "no_effect"},
    ) as req:
        recorder.attempt(req, outcome="stream_interrupted_after_output", gap_ms=50)
        recorder.attempt(req)
    assert _rows(recorder, "unreconciled_retry_after_indeterminate") == [
        (
            "blind",
            "error",
            {
                "layer": "harness",
                "attempt_ordinal": 2,
                "route_id": "primary",
                "previous_route_id": "primary",
                "previous_kind": "unknown_provider_acceptance",
                "is_fallback": False,
            },
        )
    ]


def test_idempotency_digest_conflict(recorder: Recorder) -> None:
    for i, (lrid, prompt) in enumerate((("k1", "a"), ("k2", "b"), ("ok", "c"))):
        clock = Clock(T0 + i * 1000 * MS)
        key = "same-key" if lrid != "ok" else "other-key"
        with recorder.request(
            clock,
            logical_request_id=lrid,
            tenant="acme",
            idempotency_key=key,
            request={"p": prompt},
        ) as req:
            recorder.attempt(req)
    rows = _rows(recorder, "idempotency_digest_conflict")
    assert [(lrid, sev, ev["distinct_request_digests"]) for lrid, sev, ev in rows] == [
        ("k1", "error", 2),
        ("k2", "error", 2),
    ]
    assert rows[0][2]["idempotency_digest"] == rows[1][2]["idempotency_digest"]
    assert "same-key" not in json.dumps(rows)


def test_attempt_after_terminal(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="after-complete") as req:
        recorder.attempt(req, decision="complete")
        recorder.attempt(req)
    clock = Clock(T0 + 10_000 * MS)
    with recorder.request(clock, logical_request_id="after-end") as late_req:
        recorder.attempt(late_req)
    clock.advance_ms(500)
    recorder.attempt(late_req)  # a leaked background retry after the request ended
    assert _rows(recorder, "attempt_after_terminal") == [
        (
            "after-complete",
            "error",
            {
                "layer": "harness",
                "attempt_ordinal": 2,
                "previous_decision": "complete",
                "after_request_end_ms": None,
            },
        ),
        (
            "after-end",
            "error",
            {
                "layer": "harness",
                "attempt_ordinal": 2,
                "previous_decision": None,
                "after_request_end_ms": 500.0,
            },
        ),
    ]


def test_missing_ordinals_and_missing_terminal(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="hole") as req:
        recorder.attempt(req, outcome="unavailable")
        req.attempt("primary")  # ordinal 2 taken, its span never started nor exported
        recorder.attempt(req)

    def body(r: LogicalRequest) -> None:
        recorder.attempt(r, outcome="unavailable")

    recorder.unfinished(recorder.request(Clock(T0 + 5000 * MS), logical_request_id="open"), body)
    assert _rows(recorder, "missing_ordinals") == [
        ("hole", "warning", {"layer": "harness", "ordinals": [1, 3]})
    ]
    assert _rows(recorder, "missing_terminal") == [("open", "warning", {"has_request_span": False})]


def test_telemetry_gap(recorder: Recorder) -> None:
    recorder.telemetry_gap(Clock(T0), 12, "buffer_full")
    rows = _rows(recorder, "telemetry_gap")
    assert rows[0][:2] == (None, "warning")
    assert {k: rows[0][2][k] for k in ("dropped_spans", "reason")} == {
        "dropped_spans": 12,
        "reason": "buffer_full",
    }


def test_opaque_ownership_and_breaker_open(recorder: Recorder) -> None:
    clock = Clock(T0)
    with recorder.request(clock, logical_request_id="opaque") as req:
        recorder.attempt(req, attributes={v.LOWER_MAX_RETRIES.key: 2})
    with recorder.request(clock, logical_request_id="breaker") as req:
        recorder.attempt(req, "sick", attributes={v.BREAKER_STATE.key: "open"})
    assert _rows(recorder, "opaque_retry_ownership") == [
        (
            "opaque",
            "warning",
            {"layer": "harness", "retry_owner": "harness", "lower_max_retries": 2},
        )
    ]
    assert _rows(recorder, "breaker_open_dispatch") == [
        ("breaker", "warning", {"route_id": "sick", "layer": "harness", "breaker_state": "open"})
    ]


def test_rule_catalog_is_complete_and_documented() -> None:
    from pathlib import Path

    from retryscope.analytics._queries import load

    # each rule is emitted by finding_rows or, judged with the model, by attempt_findings
    sql = load("findings") + load("model_findings")
    reference = Path(__file__).parent.parent / "docs" / "reference" / "findings.md"
    documented = reference.read_text()
    for rule in RULES:
        assert f"'{rule.id}'" in sql, rule.id
        assert f"`{rule.id}`" in documented, f"{reference.name} does not document {rule.id}"
