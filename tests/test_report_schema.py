"""The report JSON contract (``retryscope.analytics.REPORT_KEYS``): every key and its JSON type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retryscope.analytics import (
    DYNAMIC_REPORT_KEYS,
    REPORT_KEYS,
    Thresholds,
    build_report,
    connect,
    format_json,
)
from tests.recorder import MS, T0, Clock, Recorder

SCHEMA: dict[str, str] = {key.path: key.type for key in REPORT_KEYS}
N = "null"


def _json_type(value: Any) -> str:
    if value is None:
        return N
    return {bool: "bool", int: "int", float: "float", str: "str"}[type(value)]


def _walk(obj: Any, path: str, out: dict[str, set[str]]) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            child = DYNAMIC_REPORT_KEYS.get(path) or (f"{path}.{key}" if path else key)
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
