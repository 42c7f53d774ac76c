-- The headline's request figures from the rollups (sql/model/rollup_requests.sql) of the
-- requests the filters select ($since, $until on whole hours, $tenant, $operation,
-- $route; NULL: any): the additive parts summed, the ratios by the report's macros
-- (amplification.sql, fallback.sql, deadline.sql).
SELECT
    coalesce(sum(logical_requests), 0)::BIGINT AS logical_requests,
    coalesce(sum(physical_attempts), 0)::BIGINT AS physical_attempts,
    coalesce(sum(receiver_attempts), 0)::BIGINT AS receiver_attempts,
    coalesce(sum(operations), 0)::BIGINT AS operations,
    rs_sends_per_request(sum(receiver_attempts), sum(logical_requests)) AS sends_per_request,
    rs_amplification(sum(receiver_attempts), sum(operations)) AS amplification_ratio,
    coalesce(sum(requests_with_fallback), 0)::BIGINT AS requests_with_fallback,
    rs_fallback_rate(sum(requests_with_fallback), sum(logical_requests)) AS fallback_rate,
    coalesce(sum(deadline_exhausted), 0)::BIGINT AS deadline_exhausted,
    rs_deadline_exhausted_rate(sum(deadline_exhausted), sum(logical_requests))
        AS deadline_exhausted_rate
FROM rollup_requests
WHERE rs_rollup_selects(hour, tenant, operation, routes, $since, $until, $tenant,
                        $operation, $route)
