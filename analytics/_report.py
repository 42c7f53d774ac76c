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
from typing import TYPE_CHECKING, Any, Final

import duckdb
import pyarrow as pa

from retryscope._safe_text import for_markdown, for_terminal
from retryscope.analytics import _metrics as metrics
from retryscope.analytics._dataset import drop_undecodable_files
from retryscope.analytics._empty import no_requests_reason
from retryscope.analytics._filters import Dimension, Filters
from retryscope.analytics._findings import finding_counts
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS, Thresholds
from retryscope.analytics._queries import arrow
from retryscope.vocabulary import Terminal

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel

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
    "attempts_per_request",
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
    model: AuditModel,
    filters: Filters | None = None,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """Compute the report over ``model`` (:func:`retryscope.analytics.connect`).

    A file whose footer reads but whose pages do not decode is found by the first query
    that reads the damaged column: when that query comes after the model was built, the
    file is named and skipped, and the model and the report are made again without it."""
    try:
        return _report(model, filters, thresholds)
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.OutOfMemoryException) or not drop_undecodable_files(model.con):
            raise
    model.forget()  # the model (and any cache it was attached from or saved to) counted it
    return _report(model, filters, thresholds)


def _report(model: AuditModel, filters: Filters | None, thresholds: Thresholds) -> dict[str, Any]:
    f = filters or Filters()
    con = model.scoped(f)
    overall = metrics.amplification(model, filters=f)
    logical = int(overall.column("logical_requests")[0].as_py()) if overall.num_rows else 0
    amp = _numbers(_one(overall), _FLOATS)
    fallback = _numbers(_one(metrics.fallback(model, filters=f)), _FLOATS)
    deadline = _numbers(_one(metrics.deadline(model, filters=f)), _FLOATS)
    terminals = {str(r["terminal"]): int(r["n"]) for r in arrow(con, "terminals").to_pylist()}
    by_route = {
        r["value"]: r
        for r in metrics.amplification(model, by=Dimension.ROUTE, filters=f).to_pylist()
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
            metrics.amplification(model, by=Dimension.LAYER, filters=f),
            drop=BY_LAYER_DROPPED,
        )
        if r["value"] is not None
    ]
    effectiveness = _rows(metrics.retry_effectiveness(model, filters=f).drop_columns(["value"]))
    load = metrics.load(model, filters=f, thresholds=thresholds)
    clusters = metrics.synchronized_retries(model, filters=f, thresholds=thresholds)
    counts = finding_counts(model, filters=f, thresholds=thresholds)
    fractions = load.column("retry_fraction").to_pylist()
    digests = _numbers(arrow(con, "digest_keys").to_pylist()[0], ())
    gateway = _numbers(arrow(con, "gateway").to_pylist()[0], ())
    unjoined = _numbers(arrow(con, "unjoined_rows").to_pylist()[0], ())

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
        "implicit_requests": int(arrow(con, "implicit_count").to_pylist()[0]["n"]),
        "empty_reason": None if logical else no_requests_reason(model, f),
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
                _numbers(r, _FLOATS) for r in _rows(metrics.cost(model, filters=f), ("value",))
            ],
            "wasted": [_numbers(r, _FLOATS) for r in _rows(metrics.wasted_cost(model, filters=f))],
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
                for r in _rows(metrics.ineffective_retries(model, filters=f, thresholds=thresholds))
            ],
        },
        "fallback": fallback,
        "deadline": deadline,
        "latency": _numbers(_one(metrics.latency(model, filters=f)), _FLOATS),
        "load": {
            "retry_budget": thresholds.retry_budget,
            "retry_budget_min_retries": thresholds.retry_budget_min_retries,
            "window_ms": thresholds.load_window_ms,
            "windows": load.num_rows,
            "storm_windows": sum(bool(x) for x in load.column("over_budget").to_pylist()),
            "max_retry_fraction": float(max(fractions)) if fractions else 0.0,
            "synchronized_clusters": clusters.num_rows,
            "synchronized_requests": sum(
                int(x) for x in clusters.column("logical_requests").to_pylist()
            ),
        },
        "hedging": _numbers(_one(metrics.hedging(model, filters=f)), _FLOATS),
        "gateway": gateway,
        "digests": digests,
        "unjoined_rows": {"total": sum(unjoined.values()), **unjoined},
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
    """The report as titled (label, value) lists, shared by text and markdown: only why,
    when it counts no logical request (not a page of zeros)."""
    if r["empty_reason"] is not None:
        return [("no logical request", [("why", r["empty_reason"])])]
    amp, fb, dl, lat, ld, hd = (
        r["amplification"],
        r["fallback"],
        r["deadline"],
        r["latency"],
        r["load"],
        r["hedging"],
    )
    implicit = f" ({r['implicit_requests']:,} implicit)" if r["implicit_requests"] else ""
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "amplification",
            [
                ("logical requests", f"{r['logical_requests']:,}{implicit}"),
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
                    f"{ld['storm_windows']} of {ld['windows']} (budget {_pct(ld['retry_budget'])}, "
                    f"beyond {ld['retry_budget_min_retries']} repeats)",
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
        ("digests", _digest_rows(r["digests"])),
        ("rows not joined to their request", _unjoined_rows(r["unjoined_rows"])),
        (
            f"findings ({r['findings']:,})",
            [(rule, f"{n:,}") for rule, n in r["violations"].items() if n],
        ),
    ]
    return sections


def _digest_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    """Whether the data set's digests resist guessing (keyed) and join (one key)."""
    rows = [("keyed requests", f"{d['keyed_requests']:,} under {d['key_ids']:,} key(s)")]
    if d["unkeyed_requests"]:
        rows.append(
            (
                "UNKEYED requests",
                f"{d['unkeyed_requests']:,}: SHA-256 digests without a deployment key; "
                "a guessable idempotency key can be recovered (set RETRYSCOPE_DIGEST_KEY)",
            )
        )
    if d["key_ids"] > 1:
        rows.append(("digests do not join", "requests digested under different keys"))
    return rows


def _unjoined_rows(u: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows the figures could not join to their request, and why (none: one row)."""
    if not u["total"]:
        return [("none", "every row joined its request")]
    why = {
        "request_id_evicted": "request id evicted by the span attribute count limit",
        "request_id_missing": "retryscope rows written without a request id",
        "request_span_missing": "attempts whose request span is not in the data set",
    }
    return [(why[k], f"{u[k]:,}") for k in why if u[k]]


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
