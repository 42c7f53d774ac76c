-- Retries that almost never succeed: (layer, route, preceding failure kind, ordinal) with at
-- least $min_samples retries and a success rate at or below $max_success_rate.
SELECT
    layer,
    route_id,
    rs_after_kind(prev_kind, prev_outcome) AS after_kind,
    attempt_ordinal,
    count(*)::BIGINT AS retries,
    rs_successes(outcome)::BIGINT AS successes,
    rs_ratio(rs_successes(outcome), count(*)) AS success_rate,
    sum(cost_micros)::BIGINT AS cost_micros
FROM attempt_facts
WHERE rs_retry_after_failure(is_retry, prev_outcome)
GROUP BY ALL
HAVING count(*) >= $min_samples
   AND rs_ratio(rs_successes(outcome), count(*)) <= $max_success_rate
ORDER BY success_rate, retries DESC, layer, route_id, after_kind, attempt_ordinal;
