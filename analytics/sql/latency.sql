-- Logical request latency next to first-attempt latency (ms): the tail retries add.
SELECT
    rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
        AS value,
    count(*)::BIGINT AS logical_requests,
    quantile_cont(logical_ms, 0.5) AS logical_p50_ms,
    quantile_cont(logical_ms, 0.95) AS logical_p95_ms,
    quantile_cont(logical_ms, 0.99) AS logical_p99_ms,
    quantile_cont(first_attempt_ms, 0.5) AS first_attempt_p50_ms,
    quantile_cont(first_attempt_ms, 0.95) AS first_attempt_p95_ms,
    quantile_cont(first_attempt_ms, 0.99) AS first_attempt_p99_ms,
    quantile_cont(logical_ms, 0.99) - quantile_cont(first_attempt_ms, 0.99)
        AS retry_tail_p99_ms
FROM request_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
