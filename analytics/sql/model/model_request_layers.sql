-- The model's per-request tables over attempts grouped by request and layer, and the
-- receiver's view of them: the fourth per-request script, after model_requests.sql (and
-- attempt_facts.sql, its attempts with their request's fields).

-- Per request and layer: its attempts (all, outermost, receiver-visible) and its largest
-- retry group; nesting below and amplification by layer read these instead of every attempt.
CREATE OR REPLACE TEMP TABLE all_request_layers AS
WITH counts AS (
    SELECT
        h,
        layer,
        count(span_id) AS attempts,
        count(span_id) FILTER (WHERE parent_layer IS NULL) AS top_level,
        count(span_id) FILTER (WHERE is_leaf) AS receiver,
        max(group_size) AS max_n,
        -- its retries (and hedges): attempts beyond the first of their retry group
        count(span_id) FILTER (WHERE group_position > 1) AS repeats,
        -- the layer whose retries these are when the sends name one (an SDK's, a router's)
        any_value(retry_layer) AS retry_layer,
        -- distinct operations among its receiver attempts: operation ordinals run 1..k
        -- under each parent attempt, so the largest is the count (an attempt that is no
        -- send: 1)
        max(coalesce(operation_ordinal, 1)) FILTER (WHERE is_leaf) AS receiver_operations,
        -- the recorded (not classified) ordinals: range, and the distinct ones among 1..64
        -- as bits (far cheaper than count(DISTINCT)); model_checks.sql looks for gaps with
        -- these
        min(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS min_ordinal,
        max(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS max_ordinal,
        bit_count(bit_or(CASE WHEN attempt_ordinal BETWEEN 1 AND 64
                              THEN 1::UBIGINT << (attempt_ordinal - 1) END)
                  FILTER (WHERE NOT classified_from_http)) AS ordinals_1_to_64
    FROM attempt_own_facts
    GROUP BY h, layer
)
SELECT c.h, r.logical_request_id, c.* EXCLUDE (h)
FROM counts c
JOIN request_base r ON r.h = c.h;

-- Per request: how many layers retried and the attempt multiplication they produce
-- (the product of the largest retry group of each retried layer, e.g. 3 x 3 = 9), and its
-- distinct operations (the most any attempt of it made: what amplification divides by).
CREATE OR REPLACE TEMP TABLE all_request_nesting AS
WITH nesting AS (
    SELECT
        h,
        count(*) FILTER (WHERE max_n > 1) AS retried_layer_count,
        coalesce(list(coalesce(retry_layer, layer) ORDER BY rs_layer_rank(layer))
                 FILTER (WHERE max_n > 1), []) AS retried_layers,
        coalesce(max(receiver_operations), 0) AS operations,
        coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE max_n > 1)))::BIGINT, 1)
            AS multiplication
    FROM all_request_layers
    GROUP BY h
)
SELECT n.h, r.logical_request_id, n.* EXCLUDE (h)
FROM nesting n
JOIN request_base r ON r.h = n.h;

-- Receiver-visible traffic: leaf attempts, each marked original (the request's first leaf
-- of its operation, by start time, then span and trace id: one per operation) or repeat (a
-- retry, hedge or resend the receiver saw on top of it). The first of each operation is
-- found by an aggregate and a hash join (a window's sort of rows in tiny partitions costs
-- more).
CREATE OR REPLACE TEMP TABLE all_receiver_traffic AS
WITH firsts AS (
    SELECT hash(h, coalesce(operation_ordinal, 1)) AS k,
           min({t: start_time, s: span_id, r: trace_id}) AS first
    FROM all_attempt_facts
    WHERE is_leaf
    GROUP BY 1
)
SELECT
    a.h, a.logical_request_id, a.start_time, a.route_id, a.outcome, a.prev_kind,
    a.route_release, a.request_tenant, a.request_operation, a.layer,
    {t: a.start_time, s: a.span_id, r: a.trace_id} IS DISTINCT FROM f.first AS is_repeat
FROM all_attempt_facts a
JOIN firsts f ON f.k = hash(a.h, coalesce(a.operation_ordinal, 1))
WHERE a.is_leaf;
