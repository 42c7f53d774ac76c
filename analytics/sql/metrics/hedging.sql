-- Hedges, breakers and opaque ownership per slice (attempt level).
-- The attempt counts and costs are summed per slice directly. Requests are counted on
-- their key h (a 64-bit hash of the id: far cheaper than the string) and only where a
-- count needs them: the hedged and opaque requests from the attempts that are hedges or
-- opaque dispatches (few), grouped per request; the requests of each slice, for slices of
-- whole requests (overall, tenant, operation), as the rows of request_nesting (one per
-- request in scope that made an attempt) and only for the attempt-level slices (route, release,
-- layer, time bucket) by grouping every attempt per request ($dim selects the branch;
-- the other is folded away).
WITH sums AS (
    SELECT
        rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
               start_time) AS value,
        count(*) FILTER (WHERE is_hedge) AS hedge_attempts,
        count(*) FILTER (WHERE coalesce(hedge_cancelled, FALSE)) AS cancelled_attempts,
        sum(cost_micros) FILTER (WHERE coalesce(hedge_cancelled, FALSE)) AS hedge_waste_micros,
        count(*) FILTER (WHERE breaker_state = 'open') AS breaker_open_dispatches
    FROM attempt_facts
    GROUP BY 1
),
flagged AS (
    SELECT value, count(*) FILTER (WHERE hedged) AS hedged, count(*) FILTER (WHERE opaque) AS opaque
    FROM (
        SELECT
            rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
                   start_time) AS value,
            h,
            bool_or(is_hedge) AS hedged,
            bool_or(rs_opaque_ownership(retry_owner, lower_max_retries)) AS opaque
        FROM attempt_facts
        WHERE is_hedge OR rs_opaque_ownership(retry_owner, lower_max_retries)
        GROUP BY 1, 2
    )
    GROUP BY value
),
slice_requests AS (
    SELECT value, count(*) AS logical_requests
    FROM (
        SELECT
            rs_dim($dim, route_id, route_release, NULL, NULL, layer, start_time) AS value, h
        FROM attempt_facts
        WHERE $dim NOT IN ('overall', 'tenant', 'operation')
        GROUP BY 1, 2
    )
    GROUP BY value
    UNION ALL
    -- an attempt's request_tenant and request_operation are its request's (all_attempt_facts)
    SELECT rs_dim($dim, NULL, NULL, r.tenant, r.operation, NULL, NULL), count(*)
    FROM request_nesting n
    JOIN requests r ON r.h = n.h
    WHERE $dim IN ('tenant', 'operation')
    GROUP BY 1
    UNION ALL
    -- request_nesting holds in-scope requests only: no join needed overall
    SELECT 'all', count(*) FROM request_nesting WHERE $dim = 'overall'
)
SELECT
    s.value,
    q.logical_requests::BIGINT AS logical_requests,
    coalesce(f.hedged, 0)::BIGINT AS hedged_requests,
    rs_ratio(coalesce(f.hedged, 0), q.logical_requests) AS hedge_rate,
    s.hedge_attempts::BIGINT AS hedge_attempts,
    s.cancelled_attempts::BIGINT AS cancelled_attempts,
    coalesce(s.hedge_waste_micros, 0)::BIGINT AS hedge_waste_micros,
    s.breaker_open_dispatches::BIGINT AS breaker_open_dispatches,
    coalesce(f.opaque, 0)::BIGINT AS opaque_ownership_requests
FROM sums s
JOIN slice_requests q ON q.value IS NOT DISTINCT FROM s.value
LEFT JOIN flagged f ON f.value IS NOT DISTINCT FROM s.value
ORDER BY s.value NULLS LAST;
