"""Each demo scenario, run small through the real pipeline, shows what it is meant to show."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import build_report, class_names, connect, findings
from retryscope.analytics.replay._policy_drift import POLICY_DIR, policy_drift
from retryscope.demo import _scenarios as demo
from retryscope.demo._run import generate, split


def _run(tmp_path: Path, scenario: str, requests: int) -> tuple[dict[str, Any], Counter[str], Any]:
    out = tmp_path / scenario
    generate(out, requests, seed=7, scenario=scenario, progress=False)
    con, _ = connect(out)
    rules = Counter(findings(con).column("rule_id").to_pylist())
    return build_report(con), rules, con


def test_split_shares_requests_and_rejects_unknown_scenarios() -> None:
    assert split(7, "all") == {
        "healthy": 2,
        "outage-storm": 2,
        "nested-sdk": 1,
        "deadline-squeeze": 1,
        "unsafe-fallback": 1,
    }
    assert split(2, "all") == {"healthy": 1, "outage-storm": 1}
    assert split(3, "nested-sdk") == {"nested-sdk": 3}
    with pytest.raises(ValueError, match="unknown scenario"):
        split(3, "chaos")
    with pytest.raises(ValueError, match="at least 1"):
        split(0, "all")


def test_healthy_completes_under_its_policy(tmp_path: Path) -> None:
    report, rules, con = _run(tmp_path, "healthy", 12)
    assert report["logical_requests"] == 12
    assert report["terminals"] == {"complete": 12}
    assert report["amplification"]["hidden_attempts"] == 0
    errors = {"retry_after_non_retryable", "fallback_boundary_widening", "policy_drift"}
    assert not errors & set(rules)
    assert policy_drift(con).num_rows == 0  # the controller followed every policy
    # one reusable policy for every request, its document on each request span
    assert con.execute(
        "SELECT count(*), count(DISTINCT policy_digest), count(policy_document)"
        " FROM spans WHERE span_role = 'logical_request'"
    ).fetchone() == (12, 1, 12)
    assert not (tmp_path / "healthy" / POLICY_DIR).exists()  # no side file needed


def test_outage_storm_shows_synchronized_retries_and_a_storm(tmp_path: Path) -> None:
    report, rules, _ = _run(tmp_path, "outage-storm", 20)
    assert rules["synchronized_retries"] >= 5
    assert rules["retry_budget_exceeded"] >= 1
    assert report["load"]["max_retry_fraction"] > report["load"]["retry_budget"]
    assert report["requests_with_fallback"] > 0
    # the controller only falls back to prevalidated routes: every fallback success binds
    # the request's contract within its allowed boundary
    assert report["fallback"]["fallback_successes"] > 0
    assert report["fallback"]["fallback_quality"] == 1.0
    assert report["fallback"]["boundary_widened_requests"] == 0


def test_nested_sdk_shows_hidden_attempts_and_two_retry_owners(tmp_path: Path) -> None:
    report, rules, _ = _run(tmp_path, "nested-sdk", 12)
    amp = report["amplification"]
    assert amp["receiver_attempts"] > amp["harness_attempts"]
    assert amp["hidden_attempts"] == amp["receiver_attempts"] - amp["harness_attempts"]
    assert amp["nested_retry_requests"] > 0
    assert amp["max_nested_multiplication"] >= 4  # harness 2 x transport >= 2
    assert rules["nested_retry_owners"] > 0
    assert rules["opaque_retry_ownership"] > 0


def test_deadline_squeeze_shows_stop_deadline_late_success_doomed_dispatch(tmp_path: Path) -> None:
    report, rules, _ = _run(tmp_path, "deadline-squeeze", 24)
    assert report["terminals"].get("stop_deadline", 0) > 0
    assert report["deadline"]["late_successes"] > 0
    assert report["deadline"]["doomed_dispatches"] > 0
    assert rules["late_success"] > 0
    assert rules["doomed_dispatch"] > 0


def test_unsafe_fallback_is_flagged_and_drifts_from_its_reviewed_policy(tmp_path: Path) -> None:
    report, rules, con = _run(tmp_path, "unsafe-fallback", 8)
    assert report["fallback"]["boundary_widened_requests"] == 8
    for rule in ("fallback_boundary_widening", "fallback_capability_mismatch"):
        assert rules[rule] == 8, rule
    # the unvetted route breaks the capability too: incompatible, not merely degraded (the
    # finding counts what the fallback metric's degraded_fallbacks counts)
    assert rules["degraded_fallback"] == report["fallback"]["degraded_fallbacks"] == 0
    # requests 0 and 4 get 400 from the primary and still try twice more (2 findings each)
    assert rules["retry_after_non_retryable"] == 4
    drift = Counter((r["check"], r["field"]) for r in policy_drift(con).to_pylist())
    assert drift == {("RouteMismatch", "route_id"): 6, ("PostTerminalAttempt", "attempt"): 2}
    evidence = [json.loads(r["evidence"]) for r in findings(con, rule="policy_drift").to_pylist()]
    assert {e["observed"] for e in evidence if e["check"] == "RouteMismatch"} == {
        "external-unvetted"
    }
    # its classes are recorded by name beside their digests (the rules compare the digests)
    assert class_names(con) == {
        demo.CAPABILITY: demo.CAPABILITY_NAME,
        demo.BEHAVIOR: demo.BEHAVIOR_NAME,
        demo.OTHER_CAPABILITY: demo.OTHER_CAPABILITY_NAME,
        demo.OTHER_BEHAVIOR: demo.OTHER_BEHAVIOR_NAME,
    }
