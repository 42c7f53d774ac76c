-- Per in-scope request: fallback, deadline, latency and amplification facts (all but the
-- doomed dispatches, which compare each attempt with its route's median over the whole
-- scope: doomed_dispatches.sql). A SELECT over the scope's views, stored by
-- retryscope.analytics._scope_facts as all_request_facts (every request: built with the
-- model's per-request tables) or scoped_request_facts (filters); the view request_facts
-- adds the doomed dispatches.
WITH agg AS (
    SELECT
        a.h,
        bool_or(a.is_fallback) AS has_fallback,
        -- the request's answering fallback attempt: the outermost accepted one
        bool_or(a.answer) AS fallback_success,
        arg_min(a.capability_bound, rs_layer_rank(a.layer)) FILTER (WHERE a.answer)
            AS fallback_capability_bound,
        arg_min(a.behavior_bound, rs_layer_rank(a.layer)) FILTER (WHERE a.answer)
            AS fallback_behavior_bound,
        arg_min(a.boundary_allowed, rs_layer_rank(a.layer)) FILTER (WHERE a.answer)
            AS fallback_boundary_allowed,
        arg_min(a.route_id, rs_layer_rank(a.layer)) FILTER (WHERE a.answer) AS fallback_route,
        coalesce(bool_or(NOT a.boundary_allowed) FILTER (WHERE a.accepted), FALSE)
            AS boundary_widened,
        arg_min(a.duration_ms, a.start_time) FILTER (WHERE a.parent_layer IS NULL)
            AS first_attempt_ms,
        coalesce(bool_or(rs_late_success(a.outcome, a.end_time, a.request_deadline)), FALSE)
            AS late_success,
        -- amplification by request-level slices (amplification.sql)
        count(a.span_id) AS physical_attempts,
        count(a.span_id) FILTER (WHERE a.layer = 'harness') AS harness_attempts,
        count(a.span_id) FILTER (WHERE a.parent_layer IS NULL) AS top_level_attempts,
        rs_sends(a.span_id, a.is_leaf) AS receiver_attempts
    FROM (SELECT *, rs_fallback_answer(accepted, is_fallback) AS answer FROM attempt_facts) a
    GROUP BY a.h
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
    r.deadline IS NOT NULL
        AND (rs_deadline_exhausted(r.terminal) OR r.ended_at > r.deadline
             OR coalesce(g.late_success, FALSE)) AS deadline_missed,
    coalesce(g.physical_attempts, 0) AS physical_attempts,
    coalesce(g.harness_attempts, 0) AS harness_attempts,
    coalesce(g.top_level_attempts, 0) AS top_level_attempts,
    coalesce(g.receiver_attempts, 0) AS receiver_attempts,
    coalesce(n.operations, 0) AS operations,
    coalesce(n.retried_layer_count, 0) AS retried_layer_count,
    coalesce(n.multiplication, 1) AS multiplication
FROM requests r
LEFT JOIN agg g ON g.h = r.h
LEFT JOIN request_nesting n ON n.h = r.h
