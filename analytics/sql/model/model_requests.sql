-- The filter-independent tables every analytics query builds on: the model's third
-- script, after base_attempts.sql and base_http_attempts.sql (their `attempt_rows` holds
-- every physical attempt), run by retryscope.analytics.model._build.ensure_model.

-- One row per logical request (from its span and/or its attempts), before filters.
-- Grouped and joined on a 64-bit hash of the id: far cheaper than on the id string. Most
-- requests have exactly one request span and it is taken as it is; aggregating a dozen
-- strings per request costs more than the rest of this statement, so only ids seen on
-- several request spans (e.g. a redelivered message) are aggregated, and the request's
-- fields are taken from its attempts only when it has no request span at all.
CREATE OR REPLACE TEMP TABLE request_base AS
WITH request_spans AS (
    SELECT
        hash(logical_request_id) AS h,
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
        hash(logical_request_id) AS h,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        -- the route the request entered by: its first top-level attempt's
        arg_min({route: route_id, release: route_release, boundary: route_data_boundary},
                start_time) FILTER (WHERE parent_layer IS NULL) AS entry
    FROM attempt_rows
    GROUP BY hash(logical_request_id)
),
-- requests known only from their attempts (no request span was exported)
orphans AS (
    SELECT
        hash(logical_request_id) AS h,
        any_value(logical_request_id) AS logical_request_id,
        any_value(trace_id) AS trace_id,
        any_value(tenant) AS tenant,
        any_value(operation) AS operation,
        any_value(retry_owner) AS retry_owner,
        any_value(deadline) AS deadline,
        any_value(idempotency_digest) AS idempotency_digest,
        any_value(logical_request_digest) AS logical_request_digest
    FROM attempt_rows
    WHERE hash(logical_request_id) NOT IN (SELECT h FROM spans_per_request)
    GROUP BY hash(logical_request_id)
)
SELECT
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
    a.entry.route AS entry_route,
    a.entry.release AS entry_release,
    a.entry.boundary AS entry_boundary
FROM req r
FULL OUTER JOIN att a ON a.h = r.h
LEFT JOIN orphans o ON o.h = a.h;

-- Reconciliations recorded for a request: a span attribute (time unknown when on the
-- logical request span) or a `retryscope.reconciliation` event (its own time).
CREATE OR REPLACE TEMP TABLE reconciliations AS
SELECT logical_request_id,
       CASE WHEN span_role = 'logical_request' THEN NULL ELSE end_time END AS at,
       reconciliation_result AS result
FROM spans
WHERE reconciliation_result IS NOT NULL AND logical_request_id IS NOT NULL
UNION ALL
SELECT logical_request_id, e.time AS at,
       json_extract_string(e.attributes['retryscope.reconciliation.result'], '$') AS result
FROM (
    SELECT logical_request_id, unnest(events) AS e
    FROM spans
    WHERE logical_request_id IS NOT NULL AND len(events) > 0
)
WHERE e.name = 'retryscope.reconciliation';


-- Each attempt's place in its retry group (same request, layer, enclosing attempt and, for
-- sends, operation: distinct calls inside one attempt are not retries of one another).
-- Kept narrow and joined back by rowid: sorting wide rows is the expensive part of a
-- window. Filters select whole requests, so this (and everything per attempt below) does
-- not depend on them.
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
-- one 64-bit hash as the partition key: sorting on it is far cheaper than on the id string
WINDOW g AS (
    PARTITION BY hash(logical_request_id, layer, parent_layer, parent_attempt_ordinal,
                      operation_ordinal)
    ORDER BY attempt_ordinal, start_time
);

-- Every attempt with what each analysis needs: its retry group place, leaf-ness (nothing
-- beneath it, so the receiver saw it), cost, acceptance, and its request's own fields.
CREATE OR REPLACE TEMP TABLE all_attempt_facts AS
WITH children AS (
    SELECT DISTINCT hash(logical_request_id, parent_layer, parent_attempt_ordinal) AS k
    FROM attempt_rows WHERE parent_layer IS NOT NULL
),
requests_by_hash AS (
    SELECT hash(logical_request_id) AS h, * FROM request_base
)
SELECT
    -- the request's tenant, operation and digests are request_base's, and cost_estimated
    -- is folded into cost_is_estimate; per attempt they would only cost memory
    w.* EXCLUDE (parent_span_id, tenant, operation, idempotency_digest, logical_request_digest,
                 cost_estimated),
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
JOIN requests_by_hash r
  ON r.h = hash(w.logical_request_id) AND r.logical_request_id = w.logical_request_id
LEFT JOIN children c ON c.k = hash(w.logical_request_id, w.layer, w.attempt_ordinal);

DROP TABLE attempt_groups;
DROP TABLE attempt_rows;

-- The physical attempts as recorded or classified, every request's (what-if replay and
-- filter choices read them; in-scope analyses read attempt_facts). Tenant, operation and
-- digests: request_base.
CREATE OR REPLACE TEMP VIEW physical_attempts AS SELECT * FROM all_attempt_facts;

-- Per request and layer: its attempts (all, outermost, receiver-visible) and its largest
-- retry group; nesting below and amplification by layer read these instead of every attempt.
CREATE OR REPLACE TEMP TABLE all_request_layers AS
SELECT
    hash(logical_request_id) AS h,
    any_value(logical_request_id) AS logical_request_id,
    layer,
    count(span_id) AS attempts,
    count(span_id) FILTER (WHERE parent_layer IS NULL) AS top_level,
    count(span_id) FILTER (WHERE is_leaf) AS receiver,
    max(group_size) AS max_n,
    -- the layer whose retries these are when the sends name one (an SDK's, a router's)
    any_value(retry_layer) AS retry_layer,
    -- distinct operations among its receiver attempts: operation ordinals run 1..k under
    -- each parent attempt, so the largest is the count (an attempt that is no send: 1)
    max(coalesce(operation_ordinal, 1)) FILTER (WHERE is_leaf) AS receiver_operations,
    -- the recorded (not classified) ordinals: range, and the distinct ones among 1..64 as
    -- bits (far cheaper than count(DISTINCT)); model_checks.sql looks for gaps with these
    min(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS min_ordinal,
    max(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS max_ordinal,
    bit_count(bit_or(CASE WHEN attempt_ordinal BETWEEN 1 AND 64
                          THEN 1::UBIGINT << (attempt_ordinal - 1) END)
              FILTER (WHERE NOT classified_from_http)) AS ordinals_1_to_64
FROM all_attempt_facts
GROUP BY hash(logical_request_id), layer;

-- Per request: how many layers retried and the attempt multiplication they produce
-- (the product of the largest retry group of each retried layer, e.g. 3 x 3 = 9), and its
-- distinct operations (the most any attempt of it made: what amplification divides by).
CREATE OR REPLACE TEMP TABLE all_request_nesting AS
SELECT
    any_value(logical_request_id) AS logical_request_id,
    count(*) FILTER (WHERE max_n > 1) AS retried_layer_count,
    coalesce(list(coalesce(retry_layer, layer) ORDER BY rs_layer_rank(layer))
             FILTER (WHERE max_n > 1), []) AS retried_layers,
    coalesce(max(receiver_operations), 0) AS operations,
    coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE max_n > 1)))::BIGINT, 1)
        AS multiplication
FROM all_request_layers
GROUP BY h;

-- Receiver-visible traffic: leaf attempts, each marked original (the request's first leaf
-- of its operation) or repeat (a retry, hedge or resend the receiver saw on top of it).
CREATE OR REPLACE TEMP TABLE all_receiver_traffic AS
SELECT
    logical_request_id, start_time, route_id, outcome, prev_kind,
    route_release, request_tenant, request_operation, layer,
    row_number() OVER (
        PARTITION BY hash(logical_request_id, coalesce(operation_ordinal, 1))
        ORDER BY start_time, span_id) > 1 AS is_repeat
FROM all_attempt_facts
WHERE is_leaf;
