-- Wasted cost (rs_wasted_micros, macros.sql: the cost of the attempts whose result was not
-- accepted) by route and outcome kind.
SELECT
    route_id,
    coalesce(outcome_kind, CASE WHEN coalesce(hedge_cancelled, FALSE) THEN 'hedge_cancelled'
                                ELSE outcome END, 'unknown') AS outcome_kind,
    cost_currency AS currency,
    count(*)::BIGINT AS attempts,
    sum(cost_micros)::BIGINT AS wasted_micros
FROM attempt_facts
WHERE NOT accepted AND rs_has_cost(cost_actual_micros, cost_reserved_micros)
GROUP BY ALL
ORDER BY wasted_micros DESC, route_id, outcome_kind;
