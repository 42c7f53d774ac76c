-- The tables of the logical requests in scope, rebuilt by
-- retryscope.analytics.filters.apply() when the filters change. Filters are DuckDB
-- variables (rs_since, rs_until, rs_route, rs_tenant, rs_operation); NULL means "no filter".

-- The logical requests in scope of the current filters.
CREATE OR REPLACE TEMP TABLE requests AS
SELECT * FROM request_base
WHERE (getvariable('rs_since') IS NULL OR started_at >= getvariable('rs_since'))
  AND (getvariable('rs_until') IS NULL OR started_at < getvariable('rs_until'))
  AND (getvariable('rs_tenant') IS NULL OR tenant = getvariable('rs_tenant'))
  AND (getvariable('rs_operation') IS NULL OR operation = getvariable('rs_operation'))
  AND (getvariable('rs_route') IS NULL OR logical_request_id IN (
        SELECT logical_request_id FROM physical_attempts WHERE route_id = getvariable('rs_route')));

-- Each in-scope attempt's place in its retry group (same request, layer and enclosing
-- attempt). Kept narrow: sorting wide rows is the expensive part of a window.
CREATE OR REPLACE TEMP TABLE attempt_groups AS
SELECT
    aid,
    row_number() OVER g AS group_position,
    lag(outcome) OVER g AS prev_outcome,
    lag(outcome_kind) OVER g AS prev_kind,
    lag(decision) OVER g AS prev_decision,
    lag(end_time) OVER g AS prev_end,
    lag(route_id) OVER g AS prev_route_id
FROM physical_attempts
WHERE logical_request_id IN (SELECT logical_request_id FROM requests)
-- one 64-bit hash as the partition key: sorting on it is far cheaper than on the id string
WINDOW g AS (
    PARTITION BY hash(logical_request_id, layer, parent_layer, parent_attempt_ordinal)
    ORDER BY attempt_ordinal, start_time
);

-- Attempts of in-scope requests with what each analysis needs: their retry group place,
-- leaf-ness (nothing beneath them, so the receiver saw them), cost, acceptance, and the
-- request's own fields.
CREATE OR REPLACE TEMP TABLE attempt_facts AS
WITH children AS (
    SELECT DISTINCT hash(logical_request_id, parent_layer, parent_attempt_ordinal) AS k
    FROM physical_attempts WHERE parent_layer IS NOT NULL
),
w AS (
    SELECT p.*, g.* EXCLUDE (aid) FROM physical_attempts p JOIN attempt_groups g ON g.aid = p.aid
)
SELECT
    w.*,
    c.k IS NULL AS is_leaf,
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
LEFT JOIN children c ON c.k = hash(w.logical_request_id, w.layer, w.attempt_ordinal);

-- Per request: how many layers retried and the attempt multiplication they produce
-- (the product of the largest retry group of each retried layer, e.g. 3 x 3 = 9).
CREATE OR REPLACE TEMP TABLE request_nesting AS
WITH groups AS (
    SELECT hash(logical_request_id) AS h, any_value(logical_request_id) AS logical_request_id,
           layer, count(*) FILTER (WHERE NOT is_hedge) AS n
    FROM attempt_facts
    GROUP BY hash(logical_request_id), layer, parent_layer, parent_attempt_ordinal
),
layers AS (
    SELECT h, any_value(logical_request_id) AS logical_request_id, layer, max(n) AS max_n
    FROM groups GROUP BY h, layer
)
SELECT
    any_value(logical_request_id) AS logical_request_id,
    count(*) FILTER (WHERE max_n > 1) AS retried_layer_count,
    coalesce(list(layer ORDER BY rs_layer_rank(layer)) FILTER (WHERE max_n > 1), [])
        AS retried_layers,
    coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE max_n > 1)))::BIGINT, 1)
        AS multiplication
FROM layers
GROUP BY h;

-- Median attempt latency per route and layer (for doomed-dispatch checks).
CREATE OR REPLACE TEMP TABLE route_latency AS
SELECT route_id, layer, quantile_cont(duration_ms, 0.5) AS p50_ms
FROM attempt_facts
GROUP BY route_id, layer;

-- Receiver-visible traffic: leaf attempts, each marked original (the request's first leaf)
-- or repeat (a retry, hedge or resend the receiver saw on top of it).
CREATE OR REPLACE TEMP TABLE receiver_traffic AS
SELECT
    logical_request_id, start_time, route_id, outcome, prev_kind,
    route_release, request_tenant, request_operation, layer,
    row_number() OVER (PARTITION BY hash(logical_request_id) ORDER BY start_time, span_id) > 1
        AS is_repeat
FROM attempt_facts
WHERE is_leaf;

-- Per in-scope request: fallback, deadline and latency facts.
CREATE OR REPLACE TEMP TABLE request_facts AS
WITH agg AS (
    SELECT
        any_value(a.logical_request_id) AS logical_request_id,
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
        arg_min(a.duration_ms, a.start_time) FILTER (WHERE a.parent_layer IS NULL)
            AS first_attempt_ms,
        coalesce(bool_or(a.outcome = 'success' AND a.end_time > a.request_deadline), FALSE)
            AS late_success,
        count(*) FILTER (WHERE a.deadline_remaining_ms < l.p50_ms) AS doomed_dispatches
    FROM attempt_facts a
    LEFT JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
    GROUP BY hash(a.logical_request_id)
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

-- Receiver traffic per window of window_ms and slice of a Dimension (`value`; 'all'
-- overall): repeats as a fraction of attempts vs budget.
CREATE OR REPLACE MACRO load_windows_by(window_ms, budget, dim) AS TABLE
SELECT
    rs_dim(dim, route_id, route_release, request_tenant, request_operation, layer, start_time)
        AS value,
    make_timestamp((epoch_us(start_time) // (window_ms * 1000)) * (window_ms * 1000))
        AS window_start,
    count(*)::BIGINT AS attempts,
    count(*) FILTER (WHERE is_repeat)::BIGINT AS retries,
    rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) AS retry_fraction,
    rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) > budget AS over_budget,
    count(DISTINCT logical_request_id)::BIGINT AS logical_requests
FROM receiver_traffic
GROUP BY 1, 2;

-- The same, not sliced.
CREATE OR REPLACE MACRO load_windows(window_ms, budget) AS TABLE
SELECT * EXCLUDE (value) FROM load_windows_by(window_ms, budget, 'overall');


