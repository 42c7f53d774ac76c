-- The cost rollup of one build (retryscope.analytics.model._rollups): per hour of the
-- request's start, tenant, operation, the routes it made an attempt on (rollup_keys.sql)
-- and currency, the additive parts of the cost figures of
-- sql/metrics/cost.sql over the attempts that recorded a cost (rs_has_cost,
-- rs_wasted_micros: macros.sql). An attempt of no request counts with NULL keys, as it
-- counts in the report only without filters.
SELECT
    k.hour,
    k.tenant,
    k.operation,
    k.routes,
    a.cost_currency AS currency,
    sum(a.cost_micros)::BIGINT AS total_micros,
    coalesce(sum(a.cost_micros) FILTER (WHERE a.accepted), 0)::BIGINT AS accepted_micros,
    rs_wasted_micros(a.cost_micros, a.accepted) AS wasted_micros,
    coalesce(sum(a.cost_micros) FILTER (WHERE a.cost_is_estimate), 0)::BIGINT AS estimated_micros,
    coalesce(sum(a.cost_micros) FILTER (WHERE NOT a.cost_is_estimate), 0)::BIGINT
        AS measured_micros,
    count(*) FILTER (WHERE a.cost_is_estimate)::BIGINT AS estimated_attempts,
    count(*) FILTER (WHERE NOT a.cost_is_estimate)::BIGINT AS measured_attempts
FROM all_attempt_facts a
LEFT JOIN rollup_keys k ON k.h = a.h
WHERE rs_has_cost(a.cost_actual_micros, a.cost_reserved_micros)
GROUP BY ALL
