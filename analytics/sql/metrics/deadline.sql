-- Deadlines per slice (request level). Misses: stopped by the deadline, finished after it,
-- or a success that completed at or after it. Doomed: attempts dispatched with less time left
-- than their route's median attempt latency.
SELECT
    rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
        AS value,
    count(*)::BIGINT AS logical_requests,
    count(*) FILTER (WHERE deadline IS NOT NULL)::BIGINT AS requests_with_deadline,
    count(*) FILTER (WHERE terminal = 'stop_deadline')::BIGINT AS deadline_exhausted,
    rs_ratio(count(*) FILTER (WHERE terminal = 'stop_deadline'), count(*))
        AS deadline_exhausted_rate,
    count(*) FILTER (WHERE late_success)::BIGINT AS late_successes,
    count(*) FILTER (WHERE deadline_missed)::BIGINT AS deadline_misses,
    rs_ratio(count(*) FILTER (WHERE deadline_missed), count(*) FILTER (WHERE deadline IS NOT NULL))
        AS deadline_miss_rate,
    sum(doomed_dispatches)::BIGINT AS doomed_dispatches
FROM request_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
