-- Hedges, breakers and opaque ownership per slice (attempt level).
-- Requests are counted by a 64-bit hash of their id (far cheaper than the string).
SELECT
    rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
           start_time) AS value,
    count(DISTINCT hash(logical_request_id))::BIGINT AS logical_requests,
    count(DISTINCT hash(logical_request_id)) FILTER (WHERE is_hedge)::BIGINT AS hedged_requests,
    rs_ratio(count(DISTINCT hash(logical_request_id)) FILTER (WHERE is_hedge),
             count(DISTINCT hash(logical_request_id))) AS hedge_rate,
    count(*) FILTER (WHERE is_hedge)::BIGINT AS hedge_attempts,
    count(*) FILTER (WHERE coalesce(hedge_cancelled, FALSE))::BIGINT AS cancelled_attempts,
    coalesce(sum(cost_micros) FILTER (WHERE coalesce(hedge_cancelled, FALSE)), 0)::BIGINT
        AS hedge_waste_micros,
    count(*) FILTER (WHERE breaker_state = 'open')::BIGINT AS breaker_open_dispatches,
    count(DISTINCT hash(logical_request_id)) FILTER (
        WHERE retry_owner IS NOT NULL AND coalesce(lower_max_retries, 0) > 0
    )::BIGINT AS opaque_ownership_requests
FROM attempt_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
