-- Retries that almost never succeed: (layer, route, preceding failure kind, ordinal) with at
-- least $min_samples retries and a success rate at or below $max_success_rate.
SELECT
    layer,
    route_id,
    coalesce(prev_kind, prev_outcome, 'unknown') AS after_kind,
    attempt_ordinal,
    count(*)::BIGINT AS retries,
    count(*) FILTER (WHERE outcome = 'success')::BIGINT AS successes,
    rs_ratio(count(*) FILTER (WHERE outcome = 'success'), count(*)) AS success_rate,
    sum(cost_micros)::BIGINT AS cost_micros
FROM attempt_facts
WHERE is_retry AND coalesce(prev_outcome, '') <> 'success'
GROUP BY ALL
HAVING count(*) >= $min_samples
   AND rs_ratio(count(*) FILTER (WHERE outcome = 'success'), count(*)) <= $max_success_rate
ORDER BY success_rate, retries DESC, layer, route_id, after_kind, attempt_ordinal;
