-- Amplification per slice: logical requests, attempts by kind, ratio, nesting.
-- $dim: a Dimension value. A request counts once in every slice its attempts fall in
-- (route, release, layer); requests that made no attempt fall in the slice of NULL.
-- retryscope.analytics.amplification reads amplification_by_request.sql instead for
-- slices of whole requests (same figures, no per-attempt grouping).
WITH per AS (
    -- grouped on a 64-bit hash of the request id: far cheaper than on the id string
    SELECT
        rs_dim($dim, route_id, route_release, request_tenant, request_operation, layer,
               request_started_at) AS value,
        hash(logical_request_id) AS h,
        count(span_id) AS attempts,
        count(span_id) FILTER (WHERE layer = 'harness') AS harness,
        count(span_id) FILTER (WHERE parent_layer IS NULL) AS top_level,
        count(span_id) FILTER (WHERE is_leaf) AS receiver
    FROM attempt_facts
    GROUP BY 1, 2
    UNION ALL
    SELECT
        rs_dim($dim, NULL, NULL, tenant, operation, NULL, started_at),
        hash(logical_request_id), 0, 0, 0, 0
    FROM request_facts
    WHERE physical_attempts = 0
),
nesting AS (
    SELECT hash(logical_request_id) AS h, retried_layer_count, multiplication
    FROM request_facts
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
LEFT JOIN nesting n ON n.h = p.h
GROUP BY p.value
ORDER BY p.value NULLS LAST;
