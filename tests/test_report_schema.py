"""The report JSON contract: every key, its JSON type, and its README entry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from retryscope.analytics import Thresholds, build_report, connect, format_json
from tests.recorder import MS, T0, Clock, Recorder

INT, F, S, B, N = "int", "float", "str", "bool", "null"
MS_OR_NULL = "float|null"
STR_OR_NULL = "str|null"

SCHEMA: dict[str, str] = {
    "report_version": INT,
    "filters.since": STR_OR_NULL,
    "filters.until": STR_OR_NULL,
    "filters.route": STR_OR_NULL,
    "filters.tenant": STR_OR_NULL,
    "filters.operation": STR_OR_NULL,
    "logical_requests": INT,
    "physical_attempts": INT,
    "receiver_attempts": INT,
    "amplification_ratio": F,
    "completed": INT,
    "requests_with_fallback": INT,
    "fallback_rate": F,
    "deadline_exhausted": INT,
    "deadline_exhausted_rate": F,
    "terminals.<terminal>": INT,
    "routes[].route_id": S,
    "routes[].attempts": INT,
    "routes[].receiver_attempts": INT,
    "routes[].logical_requests": INT,
    "routes[].amplification_ratio": F,
    "routes[].success_rate": F,
    "routes[].is_fallback": B,
    "amplification.physical_attempts": INT,
    "amplification.harness_attempts": INT,
    "amplification.receiver_attempts": INT,
    "amplification.amplification_ratio": F,
    "amplification.hidden_attempts": INT,
    "amplification.max_attempts_per_request": INT,
    "amplification.p99_attempts_per_request": INT,
    "amplification.nested_retry_requests": INT,
    "amplification.max_nested_multiplication": INT,
    "amplification.by_layer[].layer": S,
    "amplification.by_layer[].logical_requests": INT,
    "amplification.by_layer[].physical_attempts": INT,
    "amplification.by_layer[].receiver_attempts": INT,
    "amplification.by_layer[].amplification_ratio": F,
    "amplification.by_layer[].max_attempts_per_request": INT,
    "amplification.by_layer[].p99_attempts_per_request": INT,
    "cost.by_currency[].currency": S,
    "cost.by_currency[].total_micros": INT,
    "cost.by_currency[].accepted_micros": INT,
    "cost.by_currency[].cost_amplification": F,
    "cost.by_currency[].wasted_micros": INT,
    "cost.by_currency[].estimated_micros": INT,
    "cost.by_currency[].measured_micros": INT,
    "cost.by_currency[].estimated_attempts": INT,
    "cost.by_currency[].measured_attempts": INT,
    "cost.wasted[].route_id": S,
    "cost.wasted[].outcome_kind": S,
    "cost.wasted[].currency": S,
    "cost.wasted[].attempts": INT,
    "cost.wasted[].wasted_micros": INT,
    "retry_effectiveness.by_kind[].layer": S,
    "retry_effectiveness.by_kind[].after_kind": S,
    "retry_effectiveness.by_kind[].retries": INT,
    "retry_effectiveness.by_kind[].successes": INT,
    "retry_effectiveness.by_kind[].success_rate": F,
    "retry_effectiveness.by_ordinal[].layer": S,
    "retry_effectiveness.by_ordinal[].attempt_ordinal": INT,
    "retry_effectiveness.by_ordinal[].retries": INT,
    "retry_effectiveness.by_ordinal[].successes": INT,
    "retry_effectiveness.by_ordinal[].success_rate": F,
    "retry_effectiveness.ineffective[].layer": S,
    "retry_effectiveness.ineffective[].route_id": S,
    "retry_effectiveness.ineffective[].after_kind": S,
    "retry_effectiveness.ineffective[].attempt_ordinal": INT,
    "retry_effectiveness.ineffective[].retries": INT,
    "retry_effectiveness.ineffective[].successes": INT,
    "retry_effectiveness.ineffective[].success_rate": F,
    "retry_effectiveness.ineffective[].cost_micros": INT,
    "fallback.requests_with_fallback": INT,
    "fallback.fallback_rate": F,
    "fallback.fallback_successes": INT,
    "fallback.fallback_success_rate": F,
    "fallback.quality_fallback_successes": INT,
    "fallback.fallback_quality": F,
    "fallback.degraded_fallbacks": INT,
    "fallback.unverified_fallbacks": INT,
    "fallback.boundary_widened_requests": INT,
    "deadline.requests_with_deadline": INT,
    "deadline.deadline_exhausted": INT,
    "deadline.deadline_exhausted_rate": F,
    "deadline.late_successes": INT,
    "deadline.deadline_misses": INT,
    "deadline.deadline_miss_rate": F,
    "deadline.doomed_dispatches": INT,
    "latency.logical_p50_ms": MS_OR_NULL,
    "latency.logical_p95_ms": MS_OR_NULL,
    "latency.logical_p99_ms": MS_OR_NULL,
    "latency.first_attempt_p50_ms": MS_OR_NULL,
    "latency.first_attempt_p95_ms": MS_OR_NULL,
    "latency.first_attempt_p99_ms": MS_OR_NULL,
    "latency.retry_tail_p99_ms": MS_OR_NULL,
    "load.retry_budget": F,
    "load.window_ms": INT,
    "load.windows": INT,
    "load.storm_windows": INT,
    "load.max_retry_fraction": F,
    "load.synchronized_clusters": INT,
    "load.synchronized_requests": INT,
    "hedging.hedged_requests": INT,
    "hedging.hedge_rate": F,
    "hedging.hedge_attempts": INT,
    "hedging.cancelled_attempts": INT,
    "hedging.hedge_waste_micros": INT,
    "hedging.breaker_open_dispatches": INT,
    "hedging.opaque_ownership_requests": INT,
    "violations.<rule id>": INT,
    "findings": INT,
}
DYNAMIC = {"terminals": "terminals.<terminal>", "violations": "violations.<rule id>"}


def _json_type(value: Any) -> str:
    if value is None:
        return N
    if isinstance(value, bool):
        return B
    return {int: INT, float: F, str: S}[type(value)]


def _walk(obj: Any, path: str, out: dict[str, set[str]]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            child = DYNAMIC.get(path) or (f"{path}.{key}" if path else key)
            _walk(value, child, out)
    elif isinstance(obj, list):
        for item in obj:
            _walk(item, f"{path}[]", out)
        if not obj:
            out.setdefault(f"{path}[]", set())
    else:
        out.setdefault(path, set()).add(_json_type(obj))


def _check(report: dict[str, Any], *, complete: bool) -> None:
    report = json.loads(format_json(report))  # what the CLI prints
    seen: dict[str, set[str]] = {}
    _walk(report, "", seen)
    leaves = {p: t for p, t in seen.items() if t}
    assert set(leaves) <= set(SCHEMA), set(leaves) - set(SCHEMA)
    if complete:
        assert set(leaves) == set(SCHEMA), set(SCHEMA) - set(leaves)
    for path, types in leaves.items():
        assert types <= set(SCHEMA[path].split("|")), (path, types)


def _rich(rec: Recorder) -> None:
    for i in range(3):
        clock = Clock(T0 + i * 1000 * MS)
        with rec.request(clock, tenant="acme", deadline=clock.now + 5000 * MS) as req:
            rec.attempt(req, "p", outcome="unavailable", reserved=10, gap_ms=50)
            with req.attempt("p", layer="harness"):
                rec.attempt(req, "p", layer="transport", outcome="rate_limited")
                rec.attempt(req, "p", layer="transport", outcome="unavailable")
            rec.attempt(req, "fb", priority=1, reserved=10, actual=5)


def test_report_keys_and_types_are_the_contract(recorder: Recorder) -> None:
    _rich(recorder)
    con = recorder.connect()
    everything = Thresholds(ineffective_min_samples=1, ineffective_max_success_rate=1.0)
    report = build_report(con, thresholds=everything)
    _check(report, complete=True)
    assert report["logical_requests"] == 3
    assert set(report["violations"]) >= {"nested_retry_owners", "late_success"}


def test_empty_data_set_keeps_the_contract(tmp_path: Path) -> None:
    con, _ = connect(tmp_path)
    report = build_report(con)
    _check(report, complete=False)
    assert report["logical_requests"] == 0
    assert report["latency"]["logical_p50_ms"] is None
    assert report["amplification_ratio"] == 0.0


def test_every_key_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Report JSON", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([a-z0-9_<>\[\]. ]+)`", section))
    missing = [p for p in SCHEMA if p not in documented]
    assert not missing, missing
