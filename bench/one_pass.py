"""The one-pass baseline of the report (issue goal 1): the least a first report could do.

One ``GROUP BY logical_request_id`` over the data set's files with 11 aggregates (attempts
in all and by layer, fallback, terminal, cost, duration, first route, tenant, late
success), then amplification, fallback rate, deadline exhaustion, late successes, cost and
the p50/p95/p99 latency overall, by first route and by tenant. It is no audit model (no
receiver attempts, nesting, findings or checks): it is the floor a report's first run is
measured against.
"""

from __future__ import annotations

from typing import Any

import duckdb

SQL = """
WITH per_request AS (
    SELECT
        logical_request_id,
        count(*) FILTER (WHERE span_role = 'attempt') AS attempts,
        count(*) FILTER (WHERE layer = 'harness') AS harness_attempts,
        count(*) FILTER (WHERE layer = 'sdk') AS sdk_attempts,
        count(*) FILTER (WHERE layer = 'transport') AS transport_attempts,
        bool_or(is_fallback) AS fell_back,
        any_value(terminal) FILTER (WHERE span_role = 'logical_request') AS terminal,
        sum(coalesce(cost_actual_micros, cost_reserved_micros, 0))
            FILTER (WHERE span_role = 'attempt') AS cost_micros,
        max(duration_ms) FILTER (WHERE span_role = 'logical_request') AS duration_ms,
        arg_min(route_id, start_time) FILTER (WHERE span_role = 'attempt') AS first_route,
        any_value(tenant) AS tenant,
        bool_or(outcome = 'success' AND end_time > deadline) AS late_success
    FROM read_parquet($glob, hive_partitioning = false)
    WHERE span_role IN ('attempt', 'logical_request') AND logical_request_id IS NOT NULL
    GROUP BY logical_request_id
)
SELECT
    first_route, tenant,
    count(*) AS requests,
    sum(attempts) / count(*) AS amplification,
    avg(fell_back::INT) AS fallback_rate,
    avg((terminal = 'stop_deadline')::INT) AS deadline_exhausted_rate,
    avg(late_success::INT) AS late_success_rate,
    sum(cost_micros) AS cost_micros,
    quantile_cont(duration_ms, [0.5, 0.95, 0.99]) AS latency_ms
FROM per_request
GROUP BY GROUPING SETS ((), (first_route), (tenant))
"""


def run(path: str) -> dict[str, Any]:
    """The baseline's rows over the Parquet files under ``path`` (a fresh connection)."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET enable_progress_bar = false")
        rows = con.execute(SQL, {"glob": f"{path}/**/*.parquet"}).fetchall()
        return {"rows": len(rows)}
    finally:
        con.close()
