-- Hedges, breakers and opaque ownership per slice (attempt level).
-- Each request's figures are summed per slice first (grouped on its key h, a 64-bit hash
-- of its id: far cheaper than the string), so requests are counted without DISTINCT
-- aggregates.
WITH per AS (
    SELECT
        rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
               start_time) AS value,
        h,
        bool_or(is_hedge) AS hedged,
        count(*) FILTER (WHERE is_hedge) AS hedge_attempts,
        count(*) FILTER (WHERE coalesce(hedge_cancelled, FALSE)) AS cancelled_attempts,
        sum(cost_micros) FILTER (WHERE coalesce(hedge_cancelled, FALSE)) AS hedge_waste_micros,
        count(*) FILTER (WHERE breaker_state = 'open') AS breaker_open_dispatches,
        bool_or(retry_owner IS NOT NULL AND coalesce(lower_max_retries, 0) > 0) AS opaque
    FROM attempt_facts
    GROUP BY 1, 2
)
SELECT
    value,
    count(*)::BIGINT AS logical_requests,
    count(*) FILTER (WHERE hedged)::BIGINT AS hedged_requests,
    rs_ratio(count(*) FILTER (WHERE hedged), count(*)) AS hedge_rate,
    sum(hedge_attempts)::BIGINT AS hedge_attempts,
    sum(cancelled_attempts)::BIGINT AS cancelled_attempts,
    coalesce(sum(hedge_waste_micros), 0)::BIGINT AS hedge_waste_micros,
    sum(breaker_open_dispatches)::BIGINT AS breaker_open_dispatches,
    count(*) FILTER (WHERE opaque)::BIGINT AS opaque_ownership_requests
FROM per
GROUP BY value
ORDER BY value NULLS LAST;
