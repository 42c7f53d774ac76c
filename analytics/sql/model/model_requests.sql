-- The filter-independent per-request tables every analytics query builds on: the model's
-- third per-request script, after model_attempts.sql and model_http_attempts.sql (their
-- `attempt_rows` holds every physical attempt). Aggregates carry integers (h, rowids,
-- counts, times) and strings are joined on afterwards: a string in an aggregate's state
-- is copied once per group and costs more than the rest of the statement.

-- One row per logical request (from its span and/or its attempts), before filters. Most
-- requests have exactly one request span and it is taken as it is, so only ids seen on
-- several request spans (e.g. a redelivered message) are aggregated, and the request's
-- fields are taken from its attempts only when it has no request span at all.
CREATE OR REPLACE TEMP TABLE request_base AS
WITH request_spans AS (
    SELECT
        rs_request_key(logical_request_id) AS h,
        logical_request_id, trace_id, start_time, end_time, terminal, tenant, operation,
        retry_owner, deadline, idempotency_digest, logical_request_digest,
        required_capability_digest, required_behavior_class, max_data_boundary
    FROM spans
    WHERE span_role = 'logical_request' AND logical_request_id IS NOT NULL
),
spans_per_request AS (
    SELECT h, count(*) AS n FROM request_spans GROUP BY h
),
req AS (
    SELECT s.*
    FROM request_spans s
    SEMI JOIN spans_per_request c ON c.h = s.h AND c.n = 1
    UNION ALL
    SELECT
        h,
        any_value(logical_request_id), any_value(trace_id),
        min(start_time), max(end_time),
        any_value(terminal), any_value(tenant), any_value(operation),
        any_value(retry_owner), any_value(deadline),
        any_value(idempotency_digest), any_value(logical_request_digest),
        any_value(required_capability_digest), any_value(required_behavior_class),
        any_value(max_data_boundary)
    FROM request_spans
    SEMI JOIN (SELECT h FROM spans_per_request WHERE n > 1) d USING (h)
    GROUP BY h
),
att AS (
    SELECT
        h,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        -- the route the request entered by: its first top-level attempt's
        arg_min(rowid, start_time) FILTER (WHERE parent_layer IS NULL) AS entry_row
    FROM attempt_rows
    GROUP BY h
),
-- requests known only from their attempts (no request span was exported): their fields
-- from the attempt spans (read again for these requests only)
orphans AS (
    SELECT
        rs_request_key(logical_request_id) AS h,
        any_value(logical_request_id) AS logical_request_id,
        any_value(trace_id) AS trace_id,
        any_value(tenant) AS tenant,
        any_value(operation) AS operation,
        any_value(retry_owner) AS retry_owner,
        any_value(deadline) AS deadline,
        any_value(idempotency_digest) AS idempotency_digest,
        any_value(logical_request_digest) AS logical_request_digest
    FROM spans
    WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
      AND rs_request_key(logical_request_id) IN (
          SELECT h FROM att ANTI JOIN spans_per_request USING (h))
    GROUP BY 1
)
SELECT
    coalesce(r.h, a.h) AS h,
    coalesce(r.logical_request_id, o.logical_request_id) AS logical_request_id,
    coalesce(r.trace_id, o.trace_id) AS trace_id,
    coalesce(r.start_time, a.start_time) AS started_at,
    coalesce(r.end_time, a.end_time) AS ended_at,
    r.logical_request_id IS NOT NULL AS has_request_span,
    r.terminal,
    coalesce(r.tenant, o.tenant) AS tenant,
    coalesce(r.operation, o.operation) AS operation,
    coalesce(r.retry_owner, o.retry_owner) AS retry_owner,
    coalesce(r.deadline, o.deadline) AS deadline,
    coalesce(r.idempotency_digest, o.idempotency_digest) AS idempotency_digest,
    coalesce(r.logical_request_digest, o.logical_request_digest) AS logical_request_digest,
    r.required_capability_digest,
    r.required_behavior_class,
    r.max_data_boundary,
    e.route_id AS entry_route,
    e.route_release AS entry_release,
    e.route_data_boundary AS entry_boundary
FROM req r
FULL OUTER JOIN att a ON a.h = r.h
LEFT JOIN orphans o ON o.h = a.h
LEFT JOIN attempt_rows e ON e.rowid = a.entry_row;

-- Reconciliations recorded for a request: a span attribute (time unknown when on the
-- logical request span) or a `retryscope.reconciliation` event (its own time).
CREATE OR REPLACE TEMP TABLE reconciliations AS
SELECT rs_request_key(logical_request_id) AS h, logical_request_id,
       CASE WHEN span_role = 'logical_request' THEN NULL ELSE end_time END AS at,
       reconciliation_result AS result
FROM spans
WHERE reconciliation_result IS NOT NULL AND logical_request_id IS NOT NULL
UNION ALL
SELECT rs_request_key(logical_request_id), logical_request_id, e.time AS at,
       json_extract_string(e.attributes['retryscope.reconciliation.result'], '$') AS result
FROM (
    SELECT logical_request_id, unnest(events) AS e
    FROM spans
    WHERE logical_request_id IS NOT NULL AND len(events) > 0
)
WHERE e.name = 'retryscope.reconciliation';


-- Each attempt's place in its retry group (same request, layer and enclosing attempt).
-- Kept narrow and joined back by rowid: sorting wide rows is the expensive part of a
-- window. Filters select whole requests, so this (and everything per attempt below) does
-- not depend on them. Attempts alike in ordinal and start time are ordered by span id, so
-- the order never depends on how the rows were read.
CREATE OR REPLACE TEMP TABLE attempt_groups AS
SELECT
    rowid AS aid,
    row_number() OVER g AS group_position,
    lag(outcome) OVER g AS prev_outcome,
    lag(outcome_kind) OVER g AS prev_kind,
    lag(decision) OVER g AS prev_decision,
    lag(end_time) OVER g AS prev_end,
    lag(route_id) OVER g AS prev_route_id,
    -- the group's attempts that are not hedges (request nesting multiplies these)
    count(*) FILTER (WHERE coalesce(hedge_ordinal, 0) = 0) OVER (
        g ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS group_size
FROM attempt_rows
-- one 64-bit hash as the partition key: sorting on it is far cheaper than on its parts
WINDOW g AS (
    PARTITION BY hash(h, layer, parent_layer, parent_attempt_ordinal)
    ORDER BY attempt_ordinal, start_time, span_id
);

-- Every attempt with what each analysis needs: its retry group place, leaf-ness (nothing
-- beneath it, so the receiver saw it), cost, acceptance, and its request's own fields.
CREATE OR REPLACE TEMP TABLE all_attempt_facts AS
WITH children AS (
    SELECT DISTINCT hash(h, parent_layer, parent_attempt_ordinal) AS k
    FROM attempt_rows WHERE parent_layer IS NOT NULL
)
SELECT
    -- cost_estimated is folded into cost_is_estimate
    w.* EXCLUDE (parent_span_id, cost_estimated),
    g.* EXCLUDE (aid),
    c.k IS NULL AS is_leaf,
    g.group_position > 1 AND coalesce(w.hedge_ordinal, 0) = 0 AS is_retry,
    coalesce(w.hedge_ordinal, 0) > 0 AS is_hedge,
    coalesce(w.cost_actual_micros, w.cost_reserved_micros, 0) AS cost_micros,
    (w.cost_actual_micros IS NULL AND w.cost_reserved_micros IS NOT NULL)
        OR coalesce(w.cost_estimated, FALSE) AS cost_is_estimate,
    w.outcome = 'success'
        AND coalesce(w.decision, 'complete') = 'complete'
        AND NOT coalesce(w.hedge_cancelled, FALSE)
        AND coalesce(r.terminal, 'complete') = 'complete' AS accepted,
    r.ended_at AS request_ended_at,
    r.has_request_span,
    r.terminal,
    r.tenant AS request_tenant,
    r.operation AS request_operation,
    coalesce(w.deadline, r.deadline) AS request_deadline,
    r.required_capability_digest,
    r.required_behavior_class,
    coalesce(r.max_data_boundary, r.entry_boundary) AS allowed_boundary,
    w.route_capability_digest = r.required_capability_digest AS capability_bound,
    w.route_behavior_class = r.required_behavior_class AS behavior_bound,
    rs_boundary_rank(w.route_data_boundary)
        <= rs_boundary_rank(coalesce(r.max_data_boundary, r.entry_boundary)) AS boundary_allowed
FROM attempt_rows w
JOIN attempt_groups g ON g.aid = w.rowid
JOIN request_base r ON r.h = w.h
LEFT JOIN children c ON c.k = hash(w.h, w.layer, w.attempt_ordinal);

DROP TABLE attempt_groups;
DROP TABLE attempt_rows;

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
        -- the recorded (not classified) ordinals: range, and the distinct ones among 1..64
        -- as bits (far cheaper than count(DISTINCT)); model_checks.sql looks for gaps with
        -- these
        min(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS min_ordinal,
        max(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS max_ordinal,
        bit_count(bit_or(CASE WHEN attempt_ordinal BETWEEN 1 AND 64
                              THEN 1::UBIGINT << (attempt_ordinal - 1) END)
                  FILTER (WHERE NOT classified_from_http)) AS ordinals_1_to_64
    FROM all_attempt_facts
    GROUP BY h, layer
)
SELECT c.h, r.logical_request_id, c.* EXCLUDE (h)
FROM counts c
JOIN request_base r ON r.h = c.h;

-- Per request: how many layers retried and the attempt multiplication they produce
-- (the product of the largest retry group of each retried layer, e.g. 3 x 3 = 9).
CREATE OR REPLACE TEMP TABLE all_request_nesting AS
WITH nesting AS (
    SELECT
        h,
        count(*) FILTER (WHERE max_n > 1) AS retried_layer_count,
        coalesce(list(layer ORDER BY rs_layer_rank(layer)) FILTER (WHERE max_n > 1), [])
            AS retried_layers,
        coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE max_n > 1)))::BIGINT, 1)
            AS multiplication
    FROM all_request_layers
    GROUP BY h
)
SELECT n.h, r.logical_request_id, n.* EXCLUDE (h)
FROM nesting n
JOIN request_base r ON r.h = n.h;

-- Receiver-visible traffic: leaf attempts, each marked original (the request's first leaf)
-- or repeat (a retry, hedge or resend the receiver saw on top of it).
CREATE OR REPLACE TEMP TABLE all_receiver_traffic AS
SELECT
    h, logical_request_id, start_time, route_id, outcome, prev_kind,
    route_release, request_tenant, request_operation, layer,
    row_number() OVER (PARTITION BY h ORDER BY start_time, span_id) > 1 AS is_repeat
FROM all_attempt_facts
WHERE is_leaf;
