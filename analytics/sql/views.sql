-- Macros and views every analytics query builds on. Installed by
-- retryscope.analytics.connect() after the `spans` view exists.
--
-- Filters are DuckDB variables (rs_since, rs_until, rs_route, rs_tenant, rs_operation),
-- bound by retryscope.analytics.filters.apply(); NULL means "no filter".

CREATE OR REPLACE MACRO rs_layer_rank(l) AS
    CASE l WHEN 'workflow' THEN 0 WHEN 'queue' THEN 1 WHEN 'harness' THEN 2
           WHEN 'adapter' THEN 3 WHEN 'sdk' THEN 4 WHEN 'transport' THEN 5 ELSE 6 END;

CREATE OR REPLACE MACRO rs_boundary_rank(b) AS
    CASE b WHEN 'local_process' THEN 0 WHEN 'private_service' THEN 1
           WHEN 'external_provider' THEN 2 END;

CREATE OR REPLACE MACRO rs_ratio(n, d) AS
    CASE WHEN d > 0 THEN n::DOUBLE / d ELSE 0.0 END;

CREATE OR REPLACE MACRO rs_ms(t) AS epoch_ns(t) / 1000000.0;

-- The value of a slicing dimension for one row ('all' when not sliced).
CREATE OR REPLACE MACRO rs_dim(dim, route_id, route_release, tenant, operation, layer, t) AS
    CASE dim
        WHEN 'overall' THEN 'all'
        WHEN 'route' THEN route_id
        WHEN 'route_release' THEN route_release
        WHEN 'tenant' THEN tenant
        WHEN 'operation' THEN operation
        WHEN 'layer' THEN layer
        WHEN 'time_bucket' THEN strftime(
            time_bucket(getvariable('rs_bucket'), t::TIMESTAMP), '%Y-%m-%dT%H:%M:%SZ')
    END;

-- Every physical attempt: spans marked as attempts, plus HTTP client spans that an HTTP
-- instrumentation made inside an attempt without marking them (classified as transport
-- attempts beneath their innermost enclosing attempt).
CREATE OR REPLACE VIEW physical_attempts AS
WITH roled AS (
    SELECT * FROM spans WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
),
http AS (
    SELECT * FROM spans
    WHERE span_role IS NULL AND kind = 'CLIENT' AND http_method IS NOT NULL
      AND logical_request_id IS NOT NULL
),
enclosing AS (
    SELECT
        h.trace_id, h.span_id,
        arg_max(a.layer, rs_layer_rank(a.layer)) AS parent_layer,
        arg_max(a.attempt_ordinal, rs_layer_rank(a.layer)) AS parent_attempt_ordinal,
        arg_max(a.route_release, rs_layer_rank(a.layer)) AS route_release,
        arg_max(a.route_priority, rs_layer_rank(a.layer)) AS route_priority,
        arg_max(a.is_fallback, rs_layer_rank(a.layer)) AS is_fallback,
        arg_max(a.route_capability_digest, rs_layer_rank(a.layer)) AS route_capability_digest,
        arg_max(a.route_behavior_class, rs_layer_rank(a.layer)) AS route_behavior_class,
        arg_max(a.route_data_boundary, rs_layer_rank(a.layer)) AS route_data_boundary,
        arg_max(a.retry_owner, rs_layer_rank(a.layer)) AS retry_owner,
        arg_max(a.deadline, rs_layer_rank(a.layer)) AS deadline
    FROM http h
    JOIN roled a
      ON a.logical_request_id = h.logical_request_id
     AND a.attempt_ordinal = h.attempt_ordinal
     AND a.route_id IS NOT DISTINCT FROM h.route_id
     AND a.start_time <= h.start_time AND a.end_time >= h.end_time
    GROUP BY h.trace_id, h.span_id
),
classified AS (
    SELECT
        h.logical_request_id, h.trace_id, h.span_id, h.parent_span_id, h.name,
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
        CASE
            WHEN h.http_status_code BETWEEN 200 AND 399 THEN 'success'
            WHEN h.http_status_code IN (408, 429) OR h.http_status_code >= 500 THEN 'retryable'
            WHEN h.http_status_code >= 400 THEN 'non_retryable'
            WHEN h.status_code = 'ERROR' THEN 'retryable'
        END AS outcome,
        CASE
            WHEN h.http_status_code = 429 THEN 'rate_limited'
            WHEN h.http_status_code = 408 THEN 'timeout_before_response'
            WHEN h.http_status_code >= 500 THEN 'unavailable'
            WHEN h.http_status_code IN (401, 403) THEN 'rejected'
            WHEN h.http_status_code >= 400 THEN 'invalid_request'
            WHEN h.http_status_code IS NULL AND h.status_code = 'ERROR'
                THEN 'timeout_before_response'
        END AS outcome_kind,
        h.decision, coalesce(h.retry_owner, e.retry_owner) AS retry_owner,
        h.tenant, h.operation, h.idempotency_digest, h.logical_request_digest,
        h.http_status_code, h.hedge_ordinal, h.hedge_cancelled, h.breaker_state,
        h.lower_layer_max_retries,
        TRUE AS classified_from_http
    FROM http h
    JOIN enclosing e ON e.trace_id = h.trace_id AND e.span_id = h.span_id
    WHERE e.parent_layer <> 'transport'  -- inside a marked transport attempt: not another one
)
SELECT
    logical_request_id, trace_id, span_id, parent_span_id, name,
    start_time, end_time, duration_ms,
    layer, attempt_ordinal, parent_layer, parent_attempt_ordinal,
    route_id, route_release, route_priority, is_fallback,
    route_capability_digest, route_behavior_class, route_data_boundary,
    backoff_delay_ms, retry_after_ms, not_before, deadline, deadline_remaining_ms,
    cost_reserved_micros, cost_actual_micros, cost_currency, cost_estimated,
    outcome, outcome_kind, decision, retry_owner,
    tenant, operation, idempotency_digest, logical_request_digest,
    http_status_code, hedge_ordinal, hedge_cancelled, breaker_state,
    lower_layer_max_retries,
    FALSE AS classified_from_http
FROM roled
UNION ALL BY NAME
SELECT * FROM classified;

-- One row per logical request (from its span and/or its attempts), before filters.
CREATE OR REPLACE VIEW request_base AS
WITH req AS (
    SELECT
        logical_request_id,
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
    GROUP BY logical_request_id
),
att AS (
    SELECT
        logical_request_id,
        any_value(trace_id) AS trace_id,
        min(start_time) AS start_time,
        max(end_time) AS end_time,
        any_value(tenant) AS tenant,
        any_value(operation) AS operation,
        any_value(retry_owner) AS retry_owner,
        any_value(deadline) AS deadline,
        any_value(idempotency_digest) AS idempotency_digest,
        any_value(logical_request_digest) AS logical_request_digest,
        arg_min(route_id, (parent_layer IS NOT NULL, start_time)) AS entry_route,
        arg_min(route_release, (parent_layer IS NOT NULL, start_time)) AS entry_release,
        arg_min(route_data_boundary, (parent_layer IS NOT NULL, start_time)) AS entry_boundary,
        bool_or(route_id = getvariable('rs_route')) AS touches_route
    FROM physical_attempts
    GROUP BY logical_request_id
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
    a.entry_boundary,
    coalesce(a.touches_route, FALSE) AS touches_route
FROM req r
FULL OUTER JOIN att a ON a.logical_request_id = r.logical_request_id;

-- The logical requests in scope of the current filters.
CREATE OR REPLACE VIEW requests AS
SELECT * FROM request_base
WHERE (getvariable('rs_since') IS NULL OR started_at >= getvariable('rs_since'))
  AND (getvariable('rs_until') IS NULL OR started_at < getvariable('rs_until'))
  AND (getvariable('rs_tenant') IS NULL OR tenant = getvariable('rs_tenant'))
  AND (getvariable('rs_operation') IS NULL OR operation = getvariable('rs_operation'))
  AND (getvariable('rs_route') IS NULL OR touches_route);

-- Attempts of in-scope requests with what each analysis needs: their place in their retry
-- group (same request, layer and enclosing attempt), leaf-ness (nothing beneath them, so the
-- receiver saw them), cost, acceptance, and the request's own fields.
CREATE OR REPLACE VIEW attempt_facts AS
WITH a AS (
    SELECT p.*
    FROM physical_attempts p
    WHERE p.logical_request_id IN (SELECT logical_request_id FROM requests)
),
children AS (
    SELECT DISTINCT logical_request_id, parent_layer, parent_attempt_ordinal
    FROM a WHERE parent_layer IS NOT NULL
),
w AS (
    SELECT
        a.*,
        row_number() OVER g AS group_position,
        lag(outcome) OVER g AS prev_outcome,
        lag(outcome_kind) OVER g AS prev_kind,
        lag(decision) OVER g AS prev_decision,
        lag(end_time) OVER g AS prev_end,
        lag(route_id) OVER g AS prev_route_id
    FROM a
    WINDOW g AS (
        PARTITION BY logical_request_id, layer, parent_layer, parent_attempt_ordinal
        ORDER BY attempt_ordinal, start_time
    )
)
SELECT
    w.*,
    c.logical_request_id IS NULL AS is_leaf,
    w.group_position > 1 AND coalesce(w.hedge_ordinal, 0) = 0 AS is_retry,
    coalesce(w.hedge_ordinal, 0) > 0 AS is_hedge,
    coalesce(w.cost_actual_micros, w.cost_reserved_micros, 0) AS cost_micros,
    (w.cost_actual_micros IS NULL AND w.cost_reserved_micros IS NOT NULL)
        OR coalesce(w.cost_estimated, FALSE) AS cost_is_estimate,
    w.outcome = 'success'
        AND coalesce(w.decision, 'complete') = 'complete'
        AND NOT coalesce(w.hedge_cancelled, FALSE)
        AND coalesce(r.terminal, 'complete') = 'complete' AS accepted,
    r.started_at AS request_started_at,
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
JOIN requests r ON r.logical_request_id = w.logical_request_id
LEFT JOIN children c
  ON c.logical_request_id = w.logical_request_id
 AND c.parent_layer = w.layer
 AND c.parent_attempt_ordinal = w.attempt_ordinal;

-- Per request: how many layers retried and the attempt multiplication they produce
-- (the product of the largest retry group of each retried layer, e.g. 3 x 3 = 9).
CREATE OR REPLACE VIEW request_nesting AS
WITH groups AS (
    SELECT logical_request_id, layer, count(*) FILTER (WHERE NOT is_hedge) AS n
    FROM attempt_facts
    GROUP BY logical_request_id, layer, parent_layer, parent_attempt_ordinal
),
layers AS (
    SELECT logical_request_id, layer, max(n) AS max_n FROM groups GROUP BY ALL
)
SELECT
    logical_request_id,
    count(*) FILTER (WHERE max_n > 1) AS retried_layer_count,
    coalesce(list(layer ORDER BY rs_layer_rank(layer)) FILTER (WHERE max_n > 1), [])
        AS retried_layers,
    coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE max_n > 1)))::BIGINT, 1)
        AS multiplication
FROM layers
GROUP BY logical_request_id;

-- Reconciliations recorded for a request: a span attribute (time unknown when on the
-- logical request span) or a `retryscope.reconciliation` event (its own time).
CREATE OR REPLACE VIEW reconciliations AS
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

-- Median attempt latency per route and layer (for doomed-dispatch checks).
CREATE OR REPLACE VIEW route_latency AS
SELECT route_id, layer, quantile_cont(duration_ms, 0.5) AS p50_ms
FROM attempt_facts
GROUP BY route_id, layer;

-- Receiver-visible traffic: leaf attempts, each marked original (the request's first leaf)
-- or repeat (a retry, hedge or resend the receiver saw on top of it).
CREATE OR REPLACE VIEW receiver_traffic AS
SELECT
    logical_request_id, start_time, route_id, outcome, prev_kind,
    row_number() OVER (PARTITION BY logical_request_id ORDER BY start_time, span_id) > 1
        AS is_repeat
FROM attempt_facts
WHERE is_leaf;

-- Per in-scope request: fallback, deadline and latency facts.
CREATE OR REPLACE VIEW request_facts AS
WITH agg AS (
    SELECT
        a.logical_request_id,
        bool_or(a.is_fallback) AS has_fallback,
        bool_or(a.accepted AND a.is_fallback) AS fallback_success,
        arg_min(a.capability_bound, rs_layer_rank(a.layer))
            FILTER (WHERE a.accepted AND a.is_fallback) AS fallback_capability_bound,
        arg_min(a.behavior_bound, rs_layer_rank(a.layer))
            FILTER (WHERE a.accepted AND a.is_fallback) AS fallback_behavior_bound,
        arg_min(a.boundary_allowed, rs_layer_rank(a.layer))
            FILTER (WHERE a.accepted AND a.is_fallback) AS fallback_boundary_allowed,
        arg_min(a.route_id, rs_layer_rank(a.layer))
            FILTER (WHERE a.accepted AND a.is_fallback) AS fallback_route,
        coalesce(bool_or(NOT a.boundary_allowed) FILTER (WHERE a.accepted), FALSE)
            AS boundary_widened,
        arg_min(a.duration_ms, (a.parent_layer IS NOT NULL, a.start_time)) AS first_attempt_ms,
        coalesce(bool_or(a.outcome = 'success' AND a.end_time > a.request_deadline), FALSE)
            AS late_success,
        count(*) FILTER (WHERE a.deadline_remaining_ms < l.p50_ms) AS doomed_dispatches
    FROM attempt_facts a
    LEFT JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
    GROUP BY a.logical_request_id
)
SELECT
    r.*,
    rs_ms(r.ended_at) - rs_ms(r.started_at) AS logical_ms,
    coalesce(g.has_fallback, FALSE) AS has_fallback,
    coalesce(g.fallback_success, FALSE) AS fallback_success,
    g.fallback_route,
    g.fallback_capability_bound,
    g.fallback_behavior_bound,
    g.fallback_boundary_allowed,
    coalesce(g.boundary_widened, FALSE) AS boundary_widened,
    g.first_attempt_ms,
    coalesce(g.late_success, FALSE) AS late_success,
    coalesce(g.doomed_dispatches, 0) AS doomed_dispatches,
    r.deadline IS NOT NULL
        AND (r.terminal = 'stop_deadline' OR r.ended_at > r.deadline
             OR coalesce(g.late_success, FALSE)) AS deadline_missed
FROM requests r
LEFT JOIN agg g ON g.logical_request_id = r.logical_request_id;

-- Clusters of retries from different requests starting within gap_ms of one another
-- (missing jitter); clusters of at least min_requests requests.
CREATE OR REPLACE MACRO retry_clusters(gap_ms, min_requests) AS TABLE
WITH q AS (
    SELECT logical_request_id, start_time, prev_kind, route_id,
           epoch_ns(start_time) AS t,
           epoch_ns(start_time) - lag(epoch_ns(start_time)) OVER (ORDER BY start_time) AS gap
    FROM receiver_traffic
    WHERE is_repeat
),
c AS (
    SELECT *, sum(CASE WHEN gap IS NULL OR gap > gap_ms * 1000000 THEN 1 ELSE 0 END)
                  OVER (ORDER BY start_time ROWS UNBOUNDED PRECEDING) AS cluster
    FROM q
)
SELECT
    min(start_time) AS cluster_start,
    max(start_time) AS cluster_end,
    (max(t) - min(t)) / 1000000.0 AS spread_ms,
    count(*)::BIGINT AS retries,
    count(DISTINCT logical_request_id)::BIGINT AS logical_requests,
    list(DISTINCT route_id ORDER BY route_id) AS routes,
    coalesce(list(DISTINCT prev_kind ORDER BY prev_kind) FILTER (WHERE prev_kind IS NOT NULL),
             []) AS after_kinds,
    list(DISTINCT logical_request_id ORDER BY logical_request_id) AS logical_request_ids
FROM c
GROUP BY cluster
HAVING count(DISTINCT logical_request_id) >= min_requests;

-- Receiver traffic per window of window_ms: repeats as a fraction of attempts vs budget.
CREATE OR REPLACE MACRO load_windows(window_ms, budget) AS TABLE
SELECT
    make_timestamp((epoch_us(start_time) // (window_ms * 1000)) * (window_ms * 1000))
        AS window_start,
    count(*)::BIGINT AS attempts,
    count(*) FILTER (WHERE is_repeat)::BIGINT AS retries,
    rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) AS retry_fraction,
    rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) > budget AS over_budget,
    count(DISTINCT logical_request_id)::BIGINT AS logical_requests
FROM receiver_traffic
GROUP BY 1;
