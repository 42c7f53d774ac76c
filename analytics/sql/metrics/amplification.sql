-- Amplification per slice: logical requests, attempts by kind, both figures, attempts per
-- request, excess attempts, nesting.
-- $dim: a Dimension value. Each request contributes one row per slice it falls in, from
-- the narrowest table that has its counts ($dim selects the branch; the others are
-- folded away): request_facts for slices of whole requests, request_layers per layer,
-- request_routes per route, the attempts themselves per release (a request counts once in
-- every slice its attempts fall in). Requests that made no attempt fall in the slice of
-- NULL of the attempt-level slices.
--
-- Two figures: sends per request (receiver attempts ÷ logical requests: what the receivers
-- saw per request) and retry amplification (receiver attempts ÷ distinct operations: a
-- request whose attempt embeds, uploads and chats once each reads 1.0; its operations are
-- the most distinct operations any attempt of it made). Hidden attempts are the receiver
-- attempts beyond one per operation per attempt of the outermost layer (harness when
-- there is one): what the retry owner never saw. Excess attempts are the repeats: sends
-- beyond one per distinct operation, or per layer the attempts beyond the first of their
-- retry group (that layer's retries).
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
        greatest(0, receiver_attempts - operations) AS excess,
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
               top_level, receiver, coalesce(receiver_operations, 0) AS operations,
               repeats AS excess
        FROM request_layers
        WHERE $dim = 'layer'
        UNION ALL
        SELECT route_id, h, attempts, harness, top_level, receiver, operations,
               greatest(0, receiver - operations)
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
            count(span_id) FILTER (WHERE is_leaf),
            coalesce(max(coalesce(operation_ordinal, 1)) FILTER (WHERE is_leaf), 0),
            greatest(0, count(span_id) FILTER (WHERE is_leaf)
                        - coalesce(max(coalesce(operation_ordinal, 1)) FILTER (WHERE is_leaf), 0))
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
        WHERE retried_layer_count >= 2
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
        sum(excess) AS excess,
        sum(greatest(0, receiver - operations
                        * CASE WHEN harness > 0 THEN harness ELSE top_level END)) AS hidden,
        count(*) FILTER (WHERE retried_layer_count >= 2) AS nested,
        max(multiplication) FILTER (WHERE retried_layer_count >= 2) AS multiplication
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
    rs_ratio(sum(receiver * requests), sum(requests)) AS sends_per_request,
    rs_ratio(sum(receiver * requests), sum(operations)) AS amplification_ratio,
    -- per layer: that layer's attempts per request reaching it (a harness makes attempts
    -- the receiver never sees as such); elsewhere every attempt at every layer
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
