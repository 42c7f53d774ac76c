"""The audit report: one JSON-ready dict over every metric, and its text/markdown renderings.

All figures are computed by DuckDB SQL (``analytics/sql``); Python only shapes the small
aggregated results. The keys are a stable contract, listed with their types and meanings in
:data:`~retryscope.analytics._report_contract.REPORT_KEYS` (``docs/reference/report.md``)
and checked by ``tests/test_report_schema.py``: counts are ints, ratios floats, money in
integer micro-units, latencies float milliseconds (null when there is no data).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

import duckdb
import pyarrow as pa

from retryscope._safe_text import for_markdown, for_terminal
from retryscope.analytics import _metrics as metrics
from retryscope.analytics._filters import Dimension, Filters, apply
from retryscope.analytics._findings import finding_counts
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS, Thresholds
from retryscope.analytics._queries import arrow
from retryscope.vocabulary import Terminal

REPORT_VERSION = 1


def _rows(table: pa.Table, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    keep = [c for c in table.column_names if c not in drop]
    rows: list[dict[str, Any]] = table.select(keep).to_pylist()
    return rows


def _one(table: pa.Table) -> dict[str, Any]:
    """The single overall row without its slice and request count (reported once at the
    top); with no data, zeros (and None for latencies)."""
    rows = _rows(table, drop=("value", "logical_requests"))
    if rows:
        return rows[0]
    return {
        field.name: None
        if field.name.endswith("_ms")
        else 0.0
        if pa.types.is_floating(field.type)
        else 0
        for field in table.schema
        if field.name not in ("value", "logical_requests")
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _numbers(row: dict[str, Any], floats: tuple[str, ...]) -> dict[str, Any]:
    """Counts as int, named ratios/latencies as float (None stays None)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or isinstance(value, bool | str | list):
            out[key] = value
        elif key in floats:
            out[key] = float(value)
        else:
            out[key] = int(value)
    return out


_FLOATS = (
    "amplification_ratio",
    "sends_per_request",
    "cost_amplification",
    "success_rate",
    "fallback_rate",
    "fallback_success_rate",
    "fallback_quality",
    "deadline_exhausted_rate",
    "deadline_miss_rate",
    "hedge_rate",
    "retry_fraction",
    "logical_p50_ms",
    "logical_p95_ms",
    "logical_p99_ms",
    "first_attempt_p50_ms",
    "first_attempt_p95_ms",
    "first_attempt_p99_ms",
    "retry_tail_p99_ms",
    "spread_ms",
)


BY_LAYER_DROPPED: Final = (
    "harness_attempts",
    "hidden_attempts",
    "nested_retry_requests",
    "max_nested_multiplication",
)
"""Amplification columns without a meaning per layer (attempts hidden below the harness,
nesting of whole requests): the report's ``by_layer`` rows and the UI leave them out."""


def build_report(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """Compute the report over the views of :func:`retryscope.analytics.connect`."""
    f = filters or Filters()
    apply(con, f)
    overall = metrics.amplification(con, filters=f)
    logical = int(overall.column("logical_requests")[0].as_py()) if overall.num_rows else 0
    amp = _numbers(_one(overall), _FLOATS)
    fallback = _numbers(_one(metrics.fallback(con, filters=f)), _FLOATS)
    deadline = _numbers(_one(metrics.deadline(con, filters=f)), _FLOATS)
    terminals = {str(r["terminal"]): int(r["n"]) for r in arrow(con, "terminals").to_pylist()}
    by_route = {
        r["value"]: r for r in metrics.amplification(con, by=Dimension.ROUTE, filters=f).to_pylist()
    }
    routes = []
    for r in arrow(con, "routes").to_pylist():
        a = by_route[r["route_id"]]
        routes.append(
            {
                "route_id": str(r["route_id"]),
                "attempts": int(a["physical_attempts"]),
                "receiver_attempts": int(a["receiver_attempts"]),
                "logical_requests": int(a["logical_requests"]),
                "sends_per_request": float(a["sends_per_request"]),
                "amplification_ratio": float(a["amplification_ratio"]),
                "success_rate": float(r["success_rate"]),
                "is_fallback": bool(r["is_fallback"]),
            }
        )
    by_layer = [
        _numbers({"layer": r.pop("value"), **r}, _FLOATS)
        for r in _rows(
            metrics.amplification(con, by=Dimension.LAYER, filters=f),
            drop=BY_LAYER_DROPPED,
        )
        if r["value"] is not None
    ]
    effectiveness = _rows(metrics.retry_effectiveness(con, filters=f).drop_columns(["value"]))
    load = metrics.load(con, filters=f, thresholds=thresholds)
    clusters = metrics.synchronized_retries(con, filters=f, thresholds=thresholds)
    counts = finding_counts(con, filters=f, thresholds=thresholds)
    fractions = load.column("retry_fraction").to_pylist()

    return {
        "report_version": REPORT_VERSION,
        "filters": {
            "since": _iso(f.since),
            "until": _iso(f.until),
            "route": f.route,
            "tenant": f.tenant,
            "operation": f.operation,
        },
        "logical_requests": logical,
        "physical_attempts": amp["physical_attempts"],
        "receiver_attempts": amp["receiver_attempts"],
        "operations": amp["operations"],
        "sends_per_request": amp["sends_per_request"],
        "amplification_ratio": amp["amplification_ratio"],
        "completed": terminals.get(Terminal.COMPLETE.value, 0),
        "requests_with_fallback": fallback["requests_with_fallback"],
        "fallback_rate": fallback["fallback_rate"],
        "deadline_exhausted": deadline["deadline_exhausted"],
        "deadline_exhausted_rate": deadline["deadline_exhausted_rate"],
        "terminals": terminals,
        "routes": routes,
        "amplification": {**amp, "by_layer": by_layer},
        "cost": {
            "by_currency": [
                _numbers(r, _FLOATS) for r in _rows(metrics.cost(con, filters=f), ("value",))
            ],
            "wasted": [_numbers(r, _FLOATS) for r in _rows(metrics.wasted_cost(con, filters=f))],
        },
        "retry_effectiveness": {
            "by_kind": [
                _numbers(
                    {k: v for k, v in r.items() if k not in ("slice", "attempt_ordinal")}, _FLOATS
                )
                for r in effectiveness
                if r["slice"] == "after_kind"
            ],
            "by_ordinal": [
                _numbers({k: v for k, v in r.items() if k not in ("slice", "after_kind")}, _FLOATS)
                for r in effectiveness
                if r["slice"] == "ordinal"
            ],
            "ineffective": [
                _numbers(r, _FLOATS)
                for r in _rows(metrics.ineffective_retries(con, filters=f, thresholds=thresholds))
            ],
        },
        "fallback": fallback,
        "deadline": deadline,
        "latency": _numbers(_one(metrics.latency(con, filters=f)), _FLOATS),
        "load": {
            "retry_budget": thresholds.retry_budget,
            "window_ms": thresholds.load_window_ms,
            "windows": load.num_rows,
            "storm_windows": sum(bool(x) for x in load.column("over_budget").to_pylist()),
            "max_retry_fraction": float(max(fractions)) if fractions else 0.0,
            "synchronized_clusters": clusters.num_rows,
            "synchronized_requests": sum(
                int(x) for x in clusters.column("logical_requests").to_pylist()
            ),
        },
        "hedging": _numbers(_one(metrics.hedging(con, filters=f)), _FLOATS),
        "violations": counts,
        "findings": sum(counts.values()),
    }


def format_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True)


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f} ms"


def _sections(r: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The report as titled (label, value) lists, shared by text and markdown."""
    amp, fb, dl, lat, ld, hd = (
        r["amplification"],
        r["fallback"],
        r["deadline"],
        r["latency"],
        r["load"],
        r["hedging"],
    )
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "amplification",
            [
                ("logical requests", f"{r['logical_requests']:,}"),
                ("physical attempts", f"{r['physical_attempts']:,}"),
                ("harness attempts", f"{amp['harness_attempts']:,}"),
                ("receiver attempts", f"{r['receiver_attempts']:,}"),
                ("distinct operations", f"{r['operations']:,}"),
                ("sends per request", f"{r['sends_per_request']:.3f}"),
                ("retry amplification", f"{r['amplification_ratio']:.3f}"),
                ("hidden attempts", f"{amp['hidden_attempts']:,}"),
                (
                    "attempts/request max, p99",
                    f"{amp['max_attempts_per_request']}, {amp['p99_attempts_per_request']}",
                ),
                (
                    "nested retries (max product)",
                    f"{amp['nested_retry_requests']:,} ({amp['max_nested_multiplication']})",
                ),
            ],
        ),
        (
            "cost",
            [
                (
                    f"{c['currency'] or '?'} total / accepted / wasted",
                    f"{c['total_micros'] / 1e6:,.4f} / {c['accepted_micros'] / 1e6:,.4f} / "
                    f"{c['wasted_micros'] / 1e6:,.4f}  (x{c['cost_amplification']:.2f}, "
                    f"estimated {c['estimated_micros'] / 1e6:,.4f})",
                )
                for c in r["cost"]["by_currency"]
            ],
        ),
        (
            "fallback",
            [
                ("fallback rate", f"{_pct(r['fallback_rate'])} ({r['requests_with_fallback']:,})"),
                ("fallback success rate", _pct(fb["fallback_success_rate"])),
                ("fallback quality", _pct(fb["fallback_quality"])),
                (
                    "degraded / unverified",
                    f"{fb['degraded_fallbacks']} / {fb['unverified_fallbacks']}",
                ),
                ("boundary widened", f"{fb['boundary_widened_requests']:,}"),
            ],
        ),
        (
            "deadline",
            [
                (
                    "deadline exhausted",
                    f"{r['deadline_exhausted']:,} ({_pct(r['deadline_exhausted_rate'])})",
                ),
                ("late successes", f"{dl['late_successes']:,}"),
                ("deadline miss rate", _pct(dl["deadline_miss_rate"])),
                ("doomed dispatches", f"{dl['doomed_dispatches']:,}"),
                (
                    "logical p50/p95/p99",
                    " / ".join(
                        _ms(lat[k]) for k in ("logical_p50_ms", "logical_p95_ms", "logical_p99_ms")
                    ),
                ),
                (
                    "first attempt p50/p95/p99",
                    " / ".join(
                        _ms(lat[k])
                        for k in (
                            "first_attempt_p50_ms",
                            "first_attempt_p95_ms",
                            "first_attempt_p99_ms",
                        )
                    ),
                ),
            ],
        ),
        (
            "load and hedging",
            [
                (
                    "storm windows",
                    f"{ld['storm_windows']} of {ld['windows']} (budget {_pct(ld['retry_budget'])})",
                ),
                ("max retry fraction", _pct(ld["max_retry_fraction"])),
                ("synchronized retry clusters", f"{ld['synchronized_clusters']}"),
                ("hedge rate", _pct(hd["hedge_rate"])),
                ("hedge waste (micros)", f"{hd['hedge_waste_micros']:,}"),
                ("breaker-open dispatches", f"{hd['breaker_open_dispatches']:,}"),
                ("opaque ownership requests", f"{hd['opaque_ownership_requests']:,}"),
            ],
        ),
        (
            "routes",
            [
                (
                    rt["route_id"],
                    f"{rt['attempts']:,} attempts ({rt['receiver_attempts']:,} at the "
                    f"receiver), {rt['logical_requests']:,} requests, "
                    f"{rt['sends_per_request']:.2f} sends/request, "
                    f"x{rt['amplification_ratio']:.2f}, {_pct(rt['success_rate'])} success",
                )
                for rt in r["routes"]
            ],
        ),
        ("terminals", [(t, f"{n:,}") for t, n in r["terminals"].items()]),
        (
            f"findings ({r['findings']:,})",
            [(rule, f"{n:,}") for rule, n in r["violations"].items() if n],
        ),
    ]
    return sections


def format_text(report: dict[str, Any]) -> str:
    """A fixed-width text rendering for terminals (control characters in data escaped)."""
    lines: list[str] = []
    for title, rows in _sections(report):
        lines += ["", title.upper()] if lines else [title.upper()]
        lines += [f"  {for_terminal(label):<32}{for_terminal(value)}" for label, value in rows]
    return "\n".join(lines)


def format_markdown(report: dict[str, Any]) -> str:
    """A markdown rendering (one table per section) for tickets and pull requests; data
    escaped so no value can end a cell or forge a row."""
    lines = ["# retryscope audit report"]
    for title, rows in _sections(report):
        lines += ["", f"## {for_markdown(title)}", "", "| | |", "|---|---|"]
        lines += [f"| {for_markdown(label)} | {for_markdown(value)} |" for label, value in rows]
    return "\n".join(lines)
