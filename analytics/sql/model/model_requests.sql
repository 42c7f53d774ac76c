-- The filter-independent per-request tables every analytics query builds on: the model's
-- third per-request script, after model_attempts.sql and model_http_attempts.sql (their
-- `attempt_rows` holds every physical attempt). Aggregates carry integers (h, rowids,
-- counts, times) and strings are joined on afterwards: a string in an aggregate's state
-- is copied once per group and costs more than the rest of the statement.

-- Per request with attempts: when its attempts ran and the route it entered by (its first
-- top-level attempt's).
CREATE OR REPLACE TEMP TABLE request_entries AS
SELECT
    h,
    min(start_time) AS start_time,
    max(end_time) AS end_time,
    arg_min({route: route_id, release: route_release, boundary: route_data_boundary},
            start_time) FILTER (WHERE parent_layer IS NULL) AS entry
FROM attempt_rows
GROUP BY h;

-- One row per logical request (from its span and/or its attempts), before filters. Most
-- requests have exactly one request span and it is taken as it is, so only ids seen on
-- several request spans (e.g. a redelivered message) are aggregated, and the request's
-- fields are taken from its attempts only when it has no request span at all. The
-- request spans are read as they stream by (never copied whole), joined to the narrow
-- request_entries.
CREATE OR REPLACE TEMP TABLE request_base AS
WITH request_spans AS NOT MATERIALIZED (
    SELECT
        rs_request_key(logical_request_id) AS h,
        logical_request_id, trace_id, start_time, end_time, terminal, tenant, operation,
        retry_owner, deadline, idempotency_digest, logical_request_digest,
        required_capability_digest, required_behavior_class, max_data_boundary
    FROM spans
    WHERE span_role = 'logical_request' AND logical_request_id IS NOT NULL
),
span_counts AS (
    SELECT h, count(*) AS n FROM request_spans GROUP BY h
),
req AS (
    SELECT * FROM request_spans WHERE h NOT IN (SELECT h FROM span_counts WHERE n > 1)
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
    WHERE h IN (SELECT h FROM span_counts WHERE n > 1)
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
          SELECT h FROM request_entries ANTI JOIN span_counts USING (h))
    GROUP BY 1
)
SELECT
    r.h, r.logical_request_id, r.trace_id,
    r.start_time AS started_at,
    r.end_time AS ended_at,
    TRUE AS has_request_span,
    r.terminal, r.tenant, r.operation, r.retry_owner, r.deadline,
    r.idempotency_digest, r.logical_request_digest,
    r.required_capability_digest, r.required_behavior_class, r.max_data_boundary,
    a.entry.route AS entry_route,
    a.entry.release AS entry_release,
    a.entry.boundary AS entry_boundary
FROM req r
LEFT JOIN request_entries a ON a.h = r.h
UNION ALL
SELECT
    a.h, o.logical_request_id, o.trace_id, a.start_time, a.end_time, FALSE, NULL,
    o.tenant, o.operation, o.retry_owner, o.deadline,
    o.idempotency_digest, o.logical_request_digest, NULL, NULL, NULL,
    a.entry.route, a.entry.release, a.entry.boundary
FROM request_entries a
JOIN orphans o ON o.h = a.h;

DROP TABLE request_entries;

-- Per request carrying both digests, their 64-bit hashes: the idempotency digests reused
-- for different work (model_global.sql) are looked for on these, not on the strings.
CREATE OR REPLACE TEMP TABLE request_digest_hashes AS
SELECT h, hash(idempotency_digest) AS idempotency_hash,
       hash(logical_request_digest) AS request_hash
FROM request_base
WHERE idempotency_digest IS NOT NULL AND logical_request_digest IS NOT NULL;

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

-- Request and continuation spans that carry a digest, per request and the id of the key
-- they were digested under (`retryscope.digest.key_id`, NULL: unkeyed SHA-256), every
-- copy counted as the data set holds it (`unit_spans`, the spans being built, not the
-- one copy per span of `spans`): digest_keys.sql sums these over the whole data set.
CREATE OR REPLACE TEMP TABLE digest_spans AS
SELECT rs_request_key(logical_request_id) AS h,
       attributes['retryscope.digest.key_id'] AS key_id,
       count(*) AS spans
FROM unit_spans
WHERE span_role IN ('logical_request', 'continuation')
  AND (idempotency_digest IS NOT NULL OR logical_request_digest IS NOT NULL)
GROUP BY 1, 2;


-- Each attempt's place in its retry group (same request, layer, enclosing attempt and, for
-- sends, operation: distinct calls inside one attempt are not retries of one another),
-- ordered by ordinal, start time and span id, so the order never depends on how the rows
-- were read: position, the previous attempt's outcome, and the group's attempts that are
-- not hedges (request nesting multiplies these). Filters select whole requests, so this
-- (and everything per attempt below) does not depend on them.
-- Almost every group numbers its attempts 1, 2, ... (any run of consecutive ordinals):
-- there the position is the ordinal's and the previous attempt the one numbered one less
-- (a hash join); only the other groups are ordered by a window (a sort of rows in tiny
-- partitions costs several times the join).
-- A group of sends a caller above the client repeated (operation_try: its tries 2, 3, …
-- are stamped, the first is not) holds two retry loops: the caller's (caller_tries) and
-- the client's within each try (group_size: the largest try's sends).
CREATE OR REPLACE TEMP TABLE attempt_groups AS
WITH groups AS (
    SELECT
        hash(h, layer, parent_continuation, parent_layer, parent_attempt_ordinal,
         operation_ordinal) AS k,
        min(attempt_ordinal) AS first_ordinal,
        count(*) FILTER (WHERE coalesce(hedge_ordinal, 0) = 0) AS group_size,
        count(attempt_ordinal) = count(*)
            AND min(attempt_ordinal) >= 1 AND max(attempt_ordinal) <= 64
            AND max(attempt_ordinal)::BIGINT - min(attempt_ordinal) + 1 = count(*)
            AND bit_count(bit_or(CASE WHEN attempt_ordinal BETWEEN 1 AND 64
                                      THEN 1::UBIGINT << (attempt_ordinal - 1) END)) = count(*)
            AS consecutive
    FROM attempt_rows
    GROUP BY 1
),
tries AS (
    SELECT hash(h, layer, parent_continuation, parent_layer, parent_attempt_ordinal,
         operation_ordinal) AS k,
           operation_try,
           count(*) FILTER (WHERE coalesce(hedge_ordinal, 0) = 0) AS n
    FROM attempt_rows
    WHERE operation_try IS NOT NULL
    GROUP BY 1, 2
),
repeated AS (
    SELECT k, max(operation_try) AS caller_tries, sum(n) AS later, max(n) AS largest
    FROM tries
    GROUP BY k
)
SELECT
    g.k, g.first_ordinal, g.consecutive,
    CASE WHEN r.k IS NULL THEN g.group_size
         ELSE greatest(g.group_size - r.later, r.largest) END AS group_size,
    r.caller_tries
FROM groups g
LEFT JOIN repeated r ON r.k = g.k;

CREATE OR REPLACE TEMP TABLE attempt_places AS
SELECT
    rowid AS aid,
    row_number() OVER g AS group_position,
    lag(outcome) OVER g AS prev_outcome,
    lag(outcome_kind) OVER g AS prev_kind,
    lag(decision) OVER g AS prev_decision,
    lag(end_time) OVER g AS prev_end,
    lag(route_id) OVER g AS prev_route_id
FROM attempt_rows
WHERE hash(h, layer, parent_continuation, parent_layer, parent_attempt_ordinal,
         operation_ordinal) IN (
    SELECT k FROM attempt_groups WHERE NOT consecutive)
WINDOW g AS (
    PARTITION BY hash(h, layer, parent_continuation, parent_layer, parent_attempt_ordinal,
         operation_ordinal)
    ORDER BY attempt_ordinal, start_time, span_id
);

-- Every attempt with what each analysis needs: its retry group place, leaf-ness (nothing
-- beneath it, so the receiver saw it), cost, acceptance, and its request's own fields.
CREATE OR REPLACE TEMP TABLE all_attempt_facts AS
WITH w AS NOT MATERIALIZED (
    SELECT *, rowid AS aid,
           hash(h, layer, parent_continuation, parent_layer, parent_attempt_ordinal,
         operation_ordinal) AS k
    FROM attempt_rows
),
children AS (
    SELECT DISTINCT hash(h, parent_continuation, parent_layer, parent_attempt_ordinal) AS k
    FROM attempt_rows WHERE parent_layer IS NOT NULL
),
-- the first leaf attempt of each of the request's operations (by start time, then span
-- and trace id): the receiver's original, every other leaf of the operation a repeat.
-- An aggregate and a hash join (a window's sort of rows in tiny partitions costs more).
firsts AS (
    SELECT hash(a.h, coalesce(a.operation_ordinal, 1)) AS k,
           min({t: a.start_time, s: a.span_id, r: a.trace_id}) AS first
    FROM attempt_rows a
    ANTI JOIN children c ON c.k = hash(a.h, a.continuation, a.layer, a.attempt_ordinal)
    GROUP BY 1
)
SELECT
    -- cost_estimated is folded into cost_is_estimate
    w.* EXCLUDE (aid, k, parent_span_id, cost_estimated),
    coalesce(x.group_position, w.attempt_ordinal::BIGINT - g.first_ordinal + 1)
        AS group_position,
    CASE WHEN g.consecutive THEN p.outcome ELSE x.prev_outcome END AS prev_outcome,
    CASE WHEN g.consecutive THEN p.outcome_kind ELSE x.prev_kind END AS prev_kind,
    CASE WHEN g.consecutive THEN p.decision ELSE x.prev_decision END AS prev_decision,
    CASE WHEN g.consecutive THEN p.end_time ELSE x.prev_end END AS prev_end,
    CASE WHEN g.consecutive THEN p.route_id ELSE x.prev_route_id END AS prev_route_id,
    g.group_size,
    g.caller_tries,
    c.k IS NULL AS is_leaf,
    coalesce(x.group_position, w.attempt_ordinal::BIGINT - g.first_ordinal + 1) > 1
        AND coalesce(w.hedge_ordinal, 0) = 0 AS is_retry,
    coalesce(w.hedge_ordinal, 0) > 0 AS is_hedge,
    -- a leaf that is not its operation's first: a retry, hedge or resend the receiver saw
    -- on top of the original (NULL on an attempt with attempts beneath it)
    CASE WHEN c.k IS NULL
         THEN {t: w.start_time, s: w.span_id, r: w.trace_id} IS DISTINCT FROM f.first
    END AS is_repeat,
    rs_cost_micros(w.cost_actual_micros, w.cost_reserved_micros) AS cost_micros,
    rs_cost_is_estimate(w.cost_actual_micros, w.cost_reserved_micros, w.cost_estimated)
        AS cost_is_estimate,
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
FROM w
JOIN attempt_groups g ON g.k = w.k
LEFT JOIN (
    SELECT k, attempt_ordinal, outcome, outcome_kind, decision, end_time, route_id FROM w
) p ON g.consecutive AND p.k = w.k AND p.attempt_ordinal = w.attempt_ordinal::BIGINT - 1
LEFT JOIN attempt_places x ON x.aid = w.aid
JOIN request_base r ON r.h = w.h
LEFT JOIN children c ON c.k = hash(w.h, w.continuation, w.layer, w.attempt_ordinal)
LEFT JOIN firsts f ON f.k = hash(w.h, coalesce(w.operation_ordinal, 1));

DROP TABLE attempt_places;
DROP TABLE attempt_groups;
DROP TABLE attempt_rows;

-- Per request and layer: its attempts (all, outermost, sends), the distinct operations
-- of its sends and its largest retry group; nesting below and amplification by layer
-- read these instead of every attempt. Keyed by h alone (the id is request_base's).
CREATE OR REPLACE TEMP TABLE all_request_layers AS
SELECT
    h,
    layer,
    count(span_id) AS attempts,
    count(span_id) FILTER (WHERE parent_layer IS NULL) AS top_level,
    rs_sends(span_id, is_leaf) AS receiver,
    rs_operations(operation_ordinal, is_leaf) AS operations,
    max(group_size) AS max_n,
    -- the most tries a caller above the client made of one operation (NULL: none repeated)
    max(caller_tries) AS caller_n,
    -- its retries (and hedges): attempts beyond the first of their retry group
    count(span_id) FILTER (WHERE group_position > 1) AS repeats,
    -- the layer whose retries these are when the sends name one (an SDK's, a router's)
    any_value(retry_layer) FILTER (WHERE retry_layer <> rs_caller_layer()) AS retry_layer,
    -- the recorded (not classified) ordinals: range, and the distinct ones among 1..64
    -- as bits (far cheaper than count(DISTINCT)); model_checks.sql looks for gaps with
    -- these
    min(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS min_ordinal,
    max(attempt_ordinal) FILTER (WHERE NOT classified_from_http) AS max_ordinal,
    bit_count(bit_or(CASE WHEN attempt_ordinal BETWEEN 1 AND 64
                          THEN 1::UBIGINT << (attempt_ordinal - 1) END)
              FILTER (WHERE NOT classified_from_http)) AS ordinals_1_to_64,
    -- some attempts were numbered by a continuation (model_checks.sql checks those apart)
    bool_or(continuation IS NOT NULL) AS continued
FROM all_attempt_facts
GROUP BY h, layer;

-- Per request and route: its attempts on the route (all, harness, outermost, sends), the
-- distinct operations of its sends there and those sends that repeat an operation (its
-- share of the request's resends); amplification by route reads these instead of every
-- attempt.
CREATE OR REPLACE TEMP TABLE all_request_routes AS
SELECT
    h,
    route_id,
    count(span_id) AS attempts,
    count(span_id) FILTER (WHERE layer = 'harness') AS harness,
    count(span_id) FILTER (WHERE parent_layer IS NULL) AS top_level,
    rs_sends(span_id, is_leaf) AS receiver,
    rs_operations(operation_ordinal, is_leaf) AS operations,
    rs_repeat_sends(span_id, is_repeat) AS repeats
FROM all_attempt_facts
GROUP BY h, route_id;

-- Per request: the layers that retried and the attempt multiplication they produce
-- (rs_retried, rs_multiplication), and its distinct operations (the most any attempt of
-- it made: what amplification divides by). A caller's loop above a layer's client
-- (caller_n) is a retry loop of its own, just above that layer's.
CREATE OR REPLACE TEMP TABLE all_request_nesting AS
WITH loops AS (
    SELECT h, layer, 1 AS below, coalesce(retry_layer, layer) AS loop, max_n, operations
    FROM all_request_layers
    UNION ALL
    SELECT h, layer, 0, rs_caller_layer(), caller_n, NULL
    FROM all_request_layers
    WHERE caller_n IS NOT NULL
)
SELECT
    h,
    count(*) FILTER (WHERE rs_retried(max_n)) AS retried_layer_count,
    coalesce(list(loop ORDER BY rs_layer_rank(layer), below)
             FILTER (WHERE rs_retried(max_n)), []) AS retried_layers,
    max(operations) AS operations,
    rs_multiplication(max_n) AS multiplication
FROM loops
GROUP BY h;

-- The readable names recorded beside capability and behavior class digests (request and
-- attempt spans), per request: class_names.sql names each digest of the data set by them.
CREATE OR REPLACE TEMP TABLE class_names AS
SELECT DISTINCT rs_request_key(logical_request_id) AS h, p.digest, p.name
FROM (
    SELECT logical_request_id, unnest([
        {'digest': required_capability_digest, 'name': required_capability_name},
        {'digest': required_behavior_class, 'name': required_behavior_class_name},
        {'digest': route_capability_digest, 'name': route_capability_name},
        {'digest': route_behavior_class, 'name': route_behavior_class_name}
    ]) AS p
    FROM unit_spans
    WHERE coalesce(required_capability_name, required_behavior_class_name,
                   route_capability_name, route_behavior_class_name) IS NOT NULL
)
WHERE p.digest IS NOT NULL AND p.name IS NOT NULL;
