-- Per in-scope request: fallback, deadline, latency and amplification facts. A SELECT over
-- the scope's views: retryscope.analytics._scope_facts stores it as all_request_facts
-- (every request, part of the model) or scoped_request_facts (filters), read through the
-- view request_facts.
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
        -- amplification by request-level slices (amplification.sql)
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
    coalesce(n.operations, 0) AS operations,
    coalesce(n.retried_layer_count, 0) AS retried_layer_count,
    coalesce(n.multiplication, 1) AS multiplication
FROM requests r
LEFT JOIN agg g ON g.logical_request_id = r.logical_request_id
LEFT JOIN request_nesting n ON n.logical_request_id = r.logical_request_id
