-- Amplification per slice: logical requests, attempts, sends, distinct operations, sends
-- per request, retry amplification, attempts per request, excess (resends) and hidden
-- attempts, the p99 of sends per request, nesting. Each figure's meaning is its report
-- key's (retryscope.analytics.REPORT_KEYS: amplification.*); the rules are the macros
-- rs_sends, rs_operations, rs_resends, rs_amplification, rs_nested (macros.sql).
-- $dim: a Dimension value. Each request contributes one row per slice it falls in, from
-- the narrowest table that has its counts ($dim selects the branch; the others are
-- folded away): request_facts for slices of whole requests, request_layers per layer,
-- request_routes per route, the attempts themselves per release (a request counts once in
-- every slice its attempts fall in). Requests that made no attempt fall in the slice of
-- NULL of the attempt-level slices. Per layer, the excess attempts are that layer's
-- retries (its attempts beyond the first of their retry group) and the attempts per
-- request that layer's attempts per request reaching it; per route and release, the
-- sends there that repeat an operation (rs_repeat_sends: a fallback's sends count where
-- they were made). Either way the slices' excess attempts add up to the requests'.
--
-- Every figure adds up over the requests of a slice that share a receiver count, so the
-- requests are grouped on (slice, receiver count) first and the slices summed from those
-- few rows: the p99 is then read off their cumulative request counts, where a quantile
-- over the requests would hold every request's value until the end.
WITH per AS (
    -- whole requests: request_facts carries each request's nesting. By time bucket the
    -- requests are grouped on the bucket's start (t) and its label is written once per
    -- bucket, not once per request.
    SELECT
        CASE WHEN $dim <> 'time_bucket'
             THEN rs_dim($dim, NULL, NULL, tenant, operation, NULL, started_at) END AS value,
        CASE WHEN $dim = 'time_bucket'
             THEN time_bucket(getvariable('rs_bucket'), started_at::TIMESTAMP) END AS t,
        h,
        physical_attempts AS attempts,
        harness_attempts AS harness,
        top_level_attempts AS top_level,
        receiver_attempts AS receiver,
        operations,
        NULL::BIGINT AS repeats,
        retried_layer_count,
        multiplication
    FROM request_facts
    WHERE $dim IN ('overall', 'tenant', 'operation', 'time_bucket')
    UNION ALL
    -- the attempt-level slices, with the nesting of the nested requests only (the others
    -- count in neither nesting figure), from request_nesting (request_facts carries the
    -- same figures and more columns)
    SELECT s.value, NULL::TIMESTAMP, s.* EXCLUDE (value), n.retried_layer_count, n.multiplication
    FROM (
        SELECT layer AS value, h, attempts,
               CASE WHEN layer = 'harness' THEN attempts ELSE 0 END AS harness,
               top_level, receiver, operations, repeats
        FROM request_layers
        WHERE $dim = 'layer'
        UNION ALL
        SELECT route_id, h, attempts, harness, top_level, receiver, operations, repeats
        FROM request_routes
        WHERE $dim = 'route'
        UNION ALL
        -- per release, the counts of request_routes (model_requests.sql) from the attempts,
        -- grouped on the request key h (a 64-bit hash of the id): far cheaper than the string
        SELECT
            route_release,
            h,
            count(span_id),
            count(span_id) FILTER (WHERE layer = 'harness'),
            count(span_id) FILTER (WHERE parent_layer IS NULL),
            rs_sends(span_id, is_leaf),
            rs_operations(operation_ordinal, is_leaf),
            rs_repeat_sends(span_id, is_repeat)
        FROM attempt_facts
        WHERE $dim = 'route_release'
        GROUP BY 1, 2
        UNION ALL
        SELECT NULL, h, 0, 0, 0, 0, 0, 0
        FROM request_facts
        WHERE physical_attempts = 0 AND $dim IN ('route', 'route_release', 'layer')
    ) s
    LEFT JOIN (
        SELECT h, retried_layer_count, multiplication
        FROM request_nesting
        WHERE rs_nested(retried_layer_count)
    ) n ON n.h = s.h
),
-- per slice and receiver count (a handful of rows per slice): the sums of what follows
by_receiver AS (
    SELECT
        value, t, receiver,
        count(*) AS requests,
        sum(attempts) AS attempts,
        sum(harness) AS harness,
        sum(operations) AS operations,
        sum(CASE WHEN $dim IN ('layer', 'route', 'route_release') THEN repeats
                 ELSE rs_resends(receiver, operations) END) AS excess,
        sum(greatest(0, receiver - operations
                        * CASE WHEN harness > 0 THEN harness ELSE top_level END)) AS hidden,
        count(*) FILTER (WHERE rs_nested(retried_layer_count)) AS nested,
        max(multiplication) FILTER (WHERE rs_nested(retried_layer_count)) AS multiplication
    FROM per
    GROUP BY value, t, receiver
),
cumulative AS (
    SELECT *,
           sum(requests) OVER (PARTITION BY value, t ORDER BY receiver) AS up_to,
           sum(requests) OVER (PARTITION BY value, t) AS n
    FROM by_receiver
)
SELECT
    -- the bucket's label from its start: the label of every request in it
    coalesce(value, rs_dim($dim, NULL, NULL, NULL, NULL, NULL, t)) AS value,
    sum(requests)::BIGINT AS logical_requests,
    sum(attempts)::BIGINT AS physical_attempts,
    sum(harness)::BIGINT AS harness_attempts,
    sum(receiver * requests)::BIGINT AS receiver_attempts,
    sum(operations)::BIGINT AS operations,
    rs_sends_per_request(sum(receiver * requests), sum(requests)) AS sends_per_request,
    rs_amplification(sum(receiver * requests), sum(operations)) AS amplification_ratio,
    rs_ratio(sum(attempts), sum(requests)) AS attempts_per_request,
    sum(excess)::BIGINT AS excess_attempts,
    sum(hidden)::BIGINT AS hidden_attempts,
    coalesce(max(receiver), 0)::BIGINT AS max_attempts_per_request,
    -- discrete, as quantile_disc picks it: the receiver count of the request ranked
    -- n - floor(n - 0.99 n) (at least 1st) in ascending order
    coalesce(min(receiver) FILTER (WHERE up_to >= greatest(1, n - floor(n - 0.99 * n))),
             0)::BIGINT AS p99_attempts_per_request,
    sum(nested)::BIGINT AS nested_retry_requests,
    coalesce(max(multiplication), 0)::BIGINT AS max_nested_multiplication
FROM cumulative
GROUP BY value, t
ORDER BY value NULLS LAST;
