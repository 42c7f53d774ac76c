-- Deadlines per slice (request level): exhausted (rs_exhausted_requests,
-- rs_deadline_exhausted_rate: macros.sql), late successes and misses (request_facts.sql: late_success,
-- deadline_missed), doomed dispatches (doomed_attempts.sql).
SELECT
    rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
        AS value,
    count(*)::BIGINT AS logical_requests,
    count(*) FILTER (WHERE deadline IS NOT NULL)::BIGINT AS requests_with_deadline,
    rs_exhausted_requests(terminal)::BIGINT AS deadline_exhausted,
    rs_deadline_exhausted_rate(rs_exhausted_requests(terminal), count(*))
        AS deadline_exhausted_rate,
    count(*) FILTER (WHERE late_success)::BIGINT AS late_successes,
    count(*) FILTER (WHERE deadline_missed)::BIGINT AS deadline_misses,
    rs_ratio(count(*) FILTER (WHERE deadline_missed), count(*) FILTER (WHERE deadline IS NOT NULL))
        AS deadline_miss_rate,
    sum(doomed_dispatches)::BIGINT AS doomed_dispatches
FROM request_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
