-- Logical request latency next to first-attempt latency (ms): the tail retries add.
-- One quantile state per column (a list of fractions), not one per percentile: each state
-- holds every value of its group, and DuckDB cannot spill it.
SELECT
    value,
    logical_requests,
    logical[1] AS logical_p50_ms,
    logical[2] AS logical_p95_ms,
    logical[3] AS logical_p99_ms,
    first_attempt[1] AS first_attempt_p50_ms,
    first_attempt[2] AS first_attempt_p95_ms,
    first_attempt[3] AS first_attempt_p99_ms,
    logical[3] - first_attempt[3] AS retry_tail_p99_ms
FROM (
    SELECT
        rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
            AS value,
        count(*)::BIGINT AS logical_requests,
        quantile_cont(logical_ms, [0.5, 0.95, 0.99]) AS logical,
        quantile_cont(first_attempt_ms, [0.5, 0.95, 0.99]) AS first_attempt
    FROM request_facts
    GROUP BY ALL
)
ORDER BY value NULLS LAST;
