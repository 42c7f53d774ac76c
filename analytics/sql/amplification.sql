-- Amplification per slice: logical requests, attempts by kind, ratio, nesting.
-- $dim: a Dimension value.
WITH per AS (
    SELECT
        rs_dim($dim, a.route_id, a.route_release, r.tenant, r.operation, a.layer,
               r.started_at) AS value,
        -- grouped on a 64-bit hash of the request id: far cheaper than on the id string
        hash(r.logical_request_id) AS h,
        any_value(r.logical_request_id) AS logical_request_id,
        count(a.span_id) AS attempts,
        count(a.span_id) FILTER (WHERE a.layer = 'harness') AS harness,
        count(a.span_id) FILTER (WHERE a.parent_layer IS NULL) AS top_level,
        count(a.span_id) FILTER (WHERE a.is_leaf) AS receiver
    FROM requests r
    LEFT JOIN attempt_facts a ON a.logical_request_id = r.logical_request_id
    GROUP BY 1, 2
)
SELECT
    p.value,
    count(*)::BIGINT AS logical_requests,
    sum(p.attempts)::BIGINT AS physical_attempts,
    sum(p.harness)::BIGINT AS harness_attempts,
    sum(p.receiver)::BIGINT AS receiver_attempts,
    rs_ratio(sum(p.receiver), count(*)) AS amplification_ratio,
    sum(p.receiver - CASE WHEN p.harness > 0 THEN p.harness ELSE p.top_level END)::BIGINT
        AS hidden_attempts,
    coalesce(max(p.receiver), 0)::BIGINT AS max_attempts_per_request,
    coalesce(quantile_disc(p.receiver, 0.99), 0)::BIGINT AS p99_attempts_per_request,
    count(*) FILTER (WHERE n.retried_layer_count >= 2)::BIGINT AS nested_retry_requests,
    coalesce(max(n.multiplication) FILTER (WHERE n.retried_layer_count >= 2), 0)::BIGINT
        AS max_nested_multiplication
FROM per p
LEFT JOIN request_nesting n ON n.logical_request_id = p.logical_request_id
GROUP BY p.value
ORDER BY p.value NULLS LAST;
