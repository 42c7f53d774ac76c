-- amplification.sql for slices of whole requests ($dim: overall, tenant, operation or
-- time_bucket): the per-request attempt counts are request_facts' own, so the attempts
-- are not joined again. Same columns, same figures.
SELECT
    rs_dim($dim, NULL, NULL, tenant, operation, NULL, started_at) AS value,
    count(*)::BIGINT AS logical_requests,
    sum(physical_attempts)::BIGINT AS physical_attempts,
    sum(harness_attempts)::BIGINT AS harness_attempts,
    sum(receiver_attempts)::BIGINT AS receiver_attempts,
    rs_ratio(sum(receiver_attempts), count(*)) AS amplification_ratio,
    sum(receiver_attempts - CASE WHEN harness_attempts > 0 THEN harness_attempts
                                 ELSE top_level_attempts END)::BIGINT AS hidden_attempts,
    coalesce(max(receiver_attempts), 0)::BIGINT AS max_attempts_per_request,
    coalesce(quantile_disc(receiver_attempts, 0.99), 0)::BIGINT AS p99_attempts_per_request,
    count(*) FILTER (WHERE retried_layer_count >= 2)::BIGINT AS nested_retry_requests,
    coalesce(max(multiplication) FILTER (WHERE retried_layer_count >= 2), 0)::BIGINT
        AS max_nested_multiplication
FROM request_facts
GROUP BY 1
ORDER BY 1 NULLS LAST;
