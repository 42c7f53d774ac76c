-- Cost per slice and currency, in integer micro-units, of the attempts that recorded a cost
-- (rs_has_cost; an attempt's cost_micros and cost_is_estimate: rs_cost_micros,
-- rs_cost_is_estimate; wasted: rs_wasted_micros, macros.sql). $dim: a Dimension value.
SELECT
    rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
           start_time) AS value,
    cost_currency AS currency,
    sum(cost_micros)::BIGINT AS total_micros,
    coalesce(sum(cost_micros) FILTER (WHERE accepted), 0)::BIGINT AS accepted_micros,
    rs_cost_amplification(sum(cost_micros), sum(cost_micros) FILTER (WHERE accepted))
        AS cost_amplification,
    rs_wasted_micros(cost_micros, accepted) AS wasted_micros,
    coalesce(sum(cost_micros) FILTER (WHERE cost_is_estimate), 0)::BIGINT AS estimated_micros,
    coalesce(sum(cost_micros) FILTER (WHERE NOT cost_is_estimate), 0)::BIGINT AS measured_micros,
    count(*) FILTER (WHERE cost_is_estimate)::BIGINT AS estimated_attempts,
    count(*) FILTER (WHERE NOT cost_is_estimate)::BIGINT AS measured_attempts
FROM attempt_facts
WHERE rs_has_cost(cost_actual_micros, cost_reserved_micros)
GROUP BY ALL
ORDER BY value NULLS LAST, currency NULLS LAST;
