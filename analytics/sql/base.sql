-- The filter-independent tables every analytics query builds on, computed once per
-- connection when a query first needs them (retryscope.analytics.queries.ensure_base), over
-- whatever `spans` names: the whole data set, or one request's rows for a drill-down.
-- Temp tables: DuckDB plans a deep view chain slowly, and every report query would
-- recompute it.

-- Every physical attempt: spans marked as attempts, plus HTTP client spans that an HTTP
-- instrumentation made inside an attempt without marking them (classified as transport
-- attempts beneath their innermost enclosing attempt).
CREATE OR REPLACE TEMP TABLE physical_attempts AS
WITH
-- an attempt that does not name its enclosing attempt but whose parent span is one
-- (e.g. a transport attempt marked by an HTTP instrumentation) gets it from the span tree;
-- the context API and the stamping processor stamp parent_layer/parent_attempt_ordinal,
-- so only the (narrow) unstamped rows are joined, never the whole attempt table
unstamped AS (
    SELECT DISTINCT trace_id, span_id, parent_span_id
    FROM spans
    WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
      AND parent_layer IS NULL AND parent_span_id IS NOT NULL
),
tree_parents AS (
    SELECT u.trace_id, u.span_id, u.parent_span_id,
           p.layer AS parent_layer, p.attempt_ordinal AS parent_attempt_ordinal
    FROM unstamped u
    JOIN (
        SELECT trace_id, span_id, layer, attempt_ordinal
        FROM spans
        WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
    ) p ON p.trace_id = u.trace_id AND p.span_id = u.parent_span_id
),
roled AS (
    SELECT s.* REPLACE (
        coalesce(s.parent_layer, p.parent_layer) AS parent_layer,
        coalesce(s.parent_attempt_ordinal, p.parent_attempt_ordinal) AS parent_attempt_ordinal,
        coalesce(s.outcome, CASE WHEN s.http_method IS NOT NULL
            THEN rs_http_outcome(s.http_status_code, s.status_code) END) AS outcome,
        coalesce(s.outcome_kind, CASE WHEN s.http_method IS NOT NULL AND s.outcome IS NULL
            THEN rs_http_outcome_kind(s.http_status_code, s.status_code) END) AS outcome_kind
    )
    FROM spans s
    LEFT JOIN tree_parents p
      ON s.parent_layer IS NULL AND p.trace_id = s.trace_id AND p.span_id = s.span_id
     AND p.parent_span_id = s.parent_span_id
    WHERE s.span_role = 'attempt' AND s.logical_request_id IS NOT NULL
),
-- HTTP client spans under a logical request, in current or older HTTP semantic
-- conventions (`http.method`/`http.status_code` stay in the attributes map)
http AS (
    SELECT * FROM (
        SELECT * REPLACE (
            coalesce(http_method, json_extract_string(attributes['http.method'], '$'))
                AS http_method,
            coalesce(http_status_code, TRY_CAST(attributes['http.status_code'] AS INTEGER))
                AS http_status_code
        )
        FROM spans
        WHERE span_role IS NULL AND kind = 'CLIENT' AND logical_request_id IS NOT NULL
    )
    WHERE http_method IS NOT NULL
),
-- the innermost enclosing attempt: the parent span when it is one, else the deepest
-- attempt of the stamped ordinal and route whose time span contains the HTTP span
candidates AS (
    SELECT
        h.trace_id AS http_trace_id, h.span_id AS http_span_id,
        a.layer, a.attempt_ordinal, a.route_release, a.route_priority, a.is_fallback,
        a.route_capability_digest, a.route_behavior_class, a.route_data_boundary,
        a.retry_owner, a.deadline,
        (a.span_id = h.parent_span_id, rs_layer_rank(a.layer)) AS preference
    FROM http h
    JOIN (
        SELECT *
        FROM spans
        WHERE span_role = 'attempt'
          AND logical_request_id IN (SELECT logical_request_id FROM http)
    ) a
      ON a.logical_request_id = h.logical_request_id
     AND a.attempt_ordinal = h.attempt_ordinal
     AND a.route_id IS NOT DISTINCT FROM h.route_id
     AND (a.span_id = h.parent_span_id
          OR (a.start_time <= h.start_time AND a.end_time >= h.end_time))
),
enclosing AS (
    SELECT
        http_trace_id AS trace_id, http_span_id AS span_id,
        arg_max(layer, preference) AS parent_layer,
        arg_max(attempt_ordinal, preference) AS parent_attempt_ordinal,
        arg_max(route_release, preference) AS route_release,
        arg_max(route_priority, preference) AS route_priority,
        arg_max(is_fallback, preference) AS is_fallback,
        arg_max(route_capability_digest, preference) AS route_capability_digest,
        arg_max(route_behavior_class, preference) AS route_behavior_class,
        arg_max(route_data_boundary, preference) AS route_data_boundary,
        arg_max(retry_owner, preference) AS retry_owner,
        arg_max(deadline, preference) AS deadline
    FROM candidates
    GROUP BY http_trace_id, http_span_id
),
classified AS (
    SELECT
        h.logical_request_id, h.trace_id, h.span_id,
        h.start_time, h.end_time, h.duration_ms,
        'transport' AS layer,
        (row_number() OVER (
            PARTITION BY h.logical_request_id ORDER BY h.start_time, h.span_id))::INTEGER
            AS attempt_ordinal,
        e.parent_layer, e.parent_attempt_ordinal,
        h.route_id, e.route_release, e.route_priority, e.is_fallback,
        e.route_capability_digest, e.route_behavior_class, e.route_data_boundary,
        h.backoff_delay_ms, h.retry_after_ms, h.not_before,
        coalesce(h.deadline, e.deadline) AS deadline, h.deadline_remaining_ms,
        h.cost_reserved_micros, h.cost_actual_micros, h.cost_currency, h.cost_estimated,
        rs_http_outcome(h.http_status_code, h.status_code) AS outcome,
        rs_http_outcome_kind(h.http_status_code, h.status_code) AS outcome_kind,
        h.decision, coalesce(h.retry_owner, e.retry_owner) AS retry_owner,
        h.tenant, h.operation, h.idempotency_digest, h.logical_request_digest,
        h.http_status_code, h.hedge_ordinal, h.hedge_result = 'cancelled' AS hedge_cancelled,
        h.breaker_state,
        h.lower_max_retries,
        TRUE AS classified_from_http
    FROM http h
    JOIN enclosing e ON e.trace_id = h.trace_id AND e.span_id = h.span_id
    WHERE e.parent_layer <> 'transport'  -- inside a marked transport attempt: not another one
),
unioned AS (
SELECT
    logical_request_id, trace_id, span_id,
    start_time, end_time, duration_ms,
    layer, attempt_ordinal, parent_layer, parent_attempt_ordinal,
    route_id, route_release, route_priority, is_fallback,
    route_capability_digest, route_behavior_class, route_data_boundary,
    backoff_delay_ms, retry_after_ms, not_before, deadline, deadline_remaining_ms,
    cost_reserved_micros, cost_actual_micros, cost_currency, cost_estimated,
    outcome, outcome_kind, decision, retry_owner,
    tenant, operation, idempotency_digest, logical_request_digest,
    http_status_code, hedge_ordinal, hedge_result = 'cancelled' AS hedge_cancelled,
    breaker_state, lower_max_retries,
    FALSE AS classified_from_http
FROM roled
UNION ALL BY NAME
SELECT * FROM classified
)
-- aid: a compact integer key per attempt, so per-attempt computations join back cheaply
SELECT *, row_number() OVER () AS aid FROM unioned;

-- One row per logical request (from its span and/or its attempts), before filters.
CREATE OR REPLACE TEMP TABLE request_base AS
-- grouped and joined on a 64-bit hash of the id: far cheaper than on the id string
WITH req AS (
    SELECT
        hash(logical_request_id) AS h,
        any_value(logical_request_id) AS logical_request_id,
        any_value(trace_id) AS trace_id,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        any_value(terminal) AS terminal,
        any_value(tenant) AS tenant,
        any_value(operation) AS operation,
        any_value(retry_owner) AS retry_owner,
        any_value(deadline) AS deadline,
        any_value(idempotency_digest) AS idempotency_digest,
        any_value(logical_request_digest) AS logical_request_digest,
        any_value(required_capability_digest) AS required_capability_digest,
        any_value(required_behavior_class) AS required_behavior_class,
        any_value(max_data_boundary) AS max_data_boundary
    FROM spans
    WHERE span_role = 'logical_request' AND logical_request_id IS NOT NULL
    GROUP BY hash(logical_request_id)
),
att AS (
    SELECT
        hash(logical_request_id) AS h,
        any_value(logical_request_id) AS logical_request_id,
        any_value(trace_id) AS trace_id,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        any_value(tenant) AS tenant,
        any_value(operation) AS operation,
        any_value(retry_owner) AS retry_owner,
        any_value(deadline) AS deadline,
        any_value(idempotency_digest) AS idempotency_digest,
        any_value(logical_request_digest) AS logical_request_digest,
        arg_min(route_id, start_time) FILTER (WHERE parent_layer IS NULL) AS entry_route,
        arg_min(route_release, start_time) FILTER (WHERE parent_layer IS NULL) AS entry_release,
        arg_min(route_data_boundary, start_time) FILTER (WHERE parent_layer IS NULL)
            AS entry_boundary
    FROM physical_attempts
    GROUP BY hash(logical_request_id)
)
SELECT
    coalesce(r.logical_request_id, a.logical_request_id) AS logical_request_id,
    coalesce(r.trace_id, a.trace_id) AS trace_id,
    coalesce(r.start_time, a.start_time) AS started_at,
    coalesce(r.end_time, a.end_time) AS ended_at,
    r.logical_request_id IS NOT NULL AS has_request_span,
    r.terminal,
    coalesce(r.tenant, a.tenant) AS tenant,
    coalesce(r.operation, a.operation) AS operation,
    coalesce(r.retry_owner, a.retry_owner) AS retry_owner,
    coalesce(r.deadline, a.deadline) AS deadline,
    coalesce(r.idempotency_digest, a.idempotency_digest) AS idempotency_digest,
    coalesce(r.logical_request_digest, a.logical_request_digest) AS logical_request_digest,
    r.required_capability_digest,
    r.required_behavior_class,
    r.max_data_boundary,
    a.entry_route,
    a.entry_release,
    a.entry_boundary
FROM req r
FULL OUTER JOIN att a ON a.h = r.h;

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

