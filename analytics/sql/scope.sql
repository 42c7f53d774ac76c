-- What the analyses of the in-scope logical requests read, rebuilt by
-- retryscope.analytics.filters.apply() when the filters change: `requests`,
-- `attempt_facts`, `request_nesting` and `receiver_traffic` are views onto the base tables
-- (scope_unfiltered.sql) or onto their filtered copies (scope_filtered.sql); this file then
-- builds what depends on the scope as a whole.

-- Median attempt latency per route and layer (for doomed-dispatch checks).
CREATE OR REPLACE TEMP TABLE route_latency AS
SELECT route_id, layer, quantile_cont(duration_ms, 0.5) AS p50_ms
FROM attempt_facts
GROUP BY route_id, layer;

-- Per in-scope request: fallback, deadline, latency and amplification facts.
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
        count(*) FILTER (WHERE a.deadline_remaining_ms < l.p50_ms) AS doomed_dispatches,
        -- amplification by request-level slices (amplification_by_request.sql)
        count(a.span_id) AS physical_attempts,
        count(a.span_id) FILTER (WHERE a.layer = 'harness') AS harness_attempts,
        count(a.span_id) FILTER (WHERE a.parent_layer IS NULL) AS top_level_attempts,
        count(a.span_id) FILTER (WHERE a.is_leaf) AS receiver_attempts
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
             OR coalesce(g.late_success, FALSE)) AS deadline_missed,
    coalesce(g.physical_attempts, 0) AS physical_attempts,
    coalesce(g.harness_attempts, 0) AS harness_attempts,
    coalesce(g.top_level_attempts, 0) AS top_level_attempts,
    coalesce(g.receiver_attempts, 0) AS receiver_attempts,
    coalesce(n.retried_layer_count, 0) AS retried_layer_count,
    coalesce(n.multiplication, 1) AS multiplication
FROM requests r
LEFT JOIN agg g ON g.logical_request_id = r.logical_request_id
LEFT JOIN request_nesting n ON n.logical_request_id = r.logical_request_id;

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
),
-- most clusters are one retry: keep those with enough retries to possibly hold
-- min_requests requests before building the distinct lists (4x faster)
candidates AS (
    SELECT cluster FROM c GROUP BY cluster HAVING count(*) >= min_requests
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
SEMI JOIN candidates USING (cluster)
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


