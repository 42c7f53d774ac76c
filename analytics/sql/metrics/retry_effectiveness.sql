-- Success of retries (attempts after a failed attempt in the same retry group), by the
-- failure kind that preceded them and by their ordinal, per layer and slice ($dim: a
-- Dimension value; `value` is 'all' overall).
SELECT
    CASE WHEN grouping(after_kind) = 0 THEN 'after_kind' ELSE 'ordinal' END AS slice,
    value,
    layer,
    after_kind,
    attempt_ordinal,
    count(*)::BIGINT AS retries,
    rs_successes(outcome)::BIGINT AS successes,
    rs_ratio(rs_successes(outcome), count(*)) AS success_rate
FROM (
    SELECT rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
                  start_time) AS value,
           layer, rs_after_kind(prev_kind, prev_outcome) AS after_kind,
           attempt_ordinal, outcome
    FROM attempt_facts
    WHERE rs_retry_after_failure(is_retry, prev_outcome)
)
GROUP BY GROUPING SETS ((value, layer, after_kind), (value, layer, attempt_ordinal))
ORDER BY slice, value NULLS LAST, layer, after_kind NULLS LAST, attempt_ordinal NULLS LAST;
