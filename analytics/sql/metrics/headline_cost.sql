-- The headline's cost per currency from the rollups (sql/model/rollup_cost.sql) of the
-- requests the filters select (as headline_requests.sql): cost.sql's overall rows.
SELECT
    currency,
    sum(total_micros)::BIGINT AS total_micros,
    sum(accepted_micros)::BIGINT AS accepted_micros,
    rs_cost_amplification(sum(total_micros), sum(accepted_micros)) AS cost_amplification,
    sum(wasted_micros)::BIGINT AS wasted_micros,
    sum(estimated_micros)::BIGINT AS estimated_micros,
    sum(measured_micros)::BIGINT AS measured_micros,
    sum(estimated_attempts)::BIGINT AS estimated_attempts,
    sum(measured_attempts)::BIGINT AS measured_attempts
FROM rollup_cost
WHERE rs_rollup_selects(hour, tenant, operation, routes, $since, $until, $tenant,
                        $operation, $route)
GROUP BY currency
-- a currency whose rows cancel out (a request's rows replaced: model._rollups) holds none
HAVING sum(estimated_attempts) + sum(measured_attempts) > 0
ORDER BY currency NULLS LAST
