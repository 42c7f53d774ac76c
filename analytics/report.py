"""The headline audit report: how many physical attempts each logical request cost.

All figures are computed by DuckDB SQL over the ``spans``/``attempts``/``logical_requests``
views; Python only shapes the result. The JSON keys are a stable contract (README: "Report
JSON"); counts are ints and ratios floats.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

REPORT_VERSION = 1

SUMMARY_SQL = """
WITH ids AS (
    SELECT DISTINCT logical_request_id FROM spans
    WHERE span_role IN ('attempt', 'logical_request') AND logical_request_id IS NOT NULL
),
fallback_ids AS (
    SELECT DISTINCT logical_request_id FROM attempts WHERE is_fallback
)
SELECT
    (SELECT count(*) FROM ids) AS logical_requests,
    (SELECT count(*) FROM attempts) AS physical_attempts,
    (SELECT count(*) FROM fallback_ids) AS requests_with_fallback,
    (SELECT count(*) FROM logical_requests WHERE terminal = 'stop_deadline')
        AS deadline_exhausted,
    (SELECT count(*) FROM logical_requests WHERE terminal = 'complete') AS completed
"""

TERMINALS_SQL = """
SELECT coalesce(terminal, 'unknown') AS terminal, count(*) AS n
FROM logical_requests GROUP BY ALL ORDER BY n DESC, terminal
"""

ROUTES_SQL = """
SELECT
    route_id,
    count(*) AS attempts,
    count(DISTINCT logical_request_id) AS logical_requests,
    count(*) FILTER (WHERE outcome = 'success') AS successes,
    bool_or(is_fallback) AS is_fallback
FROM attempts
WHERE route_id IS NOT NULL
GROUP BY route_id
ORDER BY min(route_priority) NULLS LAST, route_id
"""


def _ratio(num: int, den: int) -> float:
    return float(num) / den if den else 0.0


def build_report(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Compute the report over the views of :func:`retryscope.analytics.connect`."""
    row = con.execute(SUMMARY_SQL).fetchone()
    assert row is not None
    logical, attempts, with_fallback, exhausted, completed = (int(x) for x in row)
    terminals = {str(t): int(n) for t, n in con.execute(TERMINALS_SQL).fetchall()}
    routes = [
        {
            "route_id": str(route_id),
            "attempts": int(n),
            "logical_requests": int(reqs),
            "amplification_ratio": _ratio(int(n), int(reqs)),
            "success_rate": _ratio(int(ok), int(n)),
            "is_fallback": bool(fb),
        }
        for route_id, n, reqs, ok, fb in con.execute(ROUTES_SQL).fetchall()
    ]
    return {
        "report_version": REPORT_VERSION,
        "logical_requests": logical,
        "physical_attempts": attempts,
        "amplification_ratio": _ratio(attempts, logical),
        "completed": completed,
        "requests_with_fallback": with_fallback,
        "fallback_rate": _ratio(with_fallback, logical),
        "deadline_exhausted": exhausted,
        "deadline_exhausted_rate": _ratio(exhausted, logical),
        "terminals": terminals,
        "routes": routes,
    }


def format_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True)


def format_text(report: dict[str, Any]) -> str:
    """A fixed-width text rendering for terminals."""
    lines = [
        f"{'logical requests':<26}{report['logical_requests']:>12,}",
        f"{'physical attempts':<26}{report['physical_attempts']:>12,}",
        f"{'amplification ratio':<26}{report['amplification_ratio']:>12.3f}",
        f"{'completed':<26}{report['completed']:>12,}",
        f"{'fallback rate':<26}{report['fallback_rate']:>12.1%}",
        f"{'deadline exhausted':<26}{report['deadline_exhausted']:>12,}"
        f"  ({report['deadline_exhausted_rate']:.1%})",
        "",
        f"{'route':<24}{'attempts':>10}{'requests':>10}{'ampl.':>8}{'success':>9}",
    ]
    for r in report["routes"]:
        lines.append(
            f"{r['route_id'][:23]:<24}{r['attempts']:>10,}{r['logical_requests']:>10,}"
            f"{r['amplification_ratio']:>8.2f}{r['success_rate']:>9.1%}"
        )
    lines += ["", "terminals"]
    lines += [f"  {t:<24}{n:>12,}" for t, n in report["terminals"].items()]
    return "\n".join(lines)
