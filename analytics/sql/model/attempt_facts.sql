-- Every attempt with what each analysis needs: its own facts (attempt_own_facts) and its
-- request's (request_base's: the same for every attempt of the request, so stored once
-- per request), and what the two decide together: acceptance, the deadline, whether its
-- route met the request's capability, behavior and data boundary.
CREATE OR REPLACE TEMP VIEW all_attempt_facts AS
SELECT
    a.h, r.logical_request_id, a.* EXCLUDE (h),
    a.outcome = 'success'
        AND coalesce(a.decision, 'complete') = 'complete'
        AND NOT coalesce(a.hedge_cancelled, FALSE)
        AND coalesce(r.terminal, 'complete') = 'complete' AS accepted,
    r.ended_at AS request_ended_at,
    r.has_request_span,
    r.terminal,
    r.tenant AS request_tenant,
    r.operation AS request_operation,
    coalesce(a.deadline, r.deadline) AS request_deadline,
    r.required_capability_digest,
    r.required_behavior_class,
    coalesce(r.max_data_boundary, r.entry_boundary) AS allowed_boundary,
    a.route_capability_digest = r.required_capability_digest AS capability_bound,
    a.route_behavior_class = r.required_behavior_class AS behavior_bound,
    rs_boundary_rank(a.route_data_boundary)
        <= rs_boundary_rank(coalesce(r.max_data_boundary, r.entry_boundary)) AS boundary_allowed
FROM attempt_own_facts a
JOIN request_base r ON r.h = a.h;
