-- One logical request's attempts in order; $id is a logical request id, trace id or
-- idempotency digest (which may name several requests). late_success: a success at or
-- after its deadline (rs_late_success, as the Deadlines figures and findings judge it).
WITH ids AS (
    SELECT logical_request_id FROM request_base
    WHERE logical_request_id = $id OR trace_id = $id OR idempotency_digest = $id
)
SELECT
    a.logical_request_id, a.trace_id, a.span_id,
    a.layer, a.attempt_ordinal, a.parent_layer, a.parent_attempt_ordinal,
    a.continuation, a.parent_continuation,
    a.operation_ordinal, a.retry_layer,
    a.route_id, a.route_release, a.is_fallback, a.hedge_ordinal,
    a.start_time, a.end_time, a.duration_ms,
    a.backoff_delay_ms, a.retry_after_ms, a.not_before, a.deadline_remaining_ms,
    a.cost_micros, a.cost_currency, a.cost_is_estimate,
    a.outcome, a.outcome_kind, a.http_status_code, a.decision,
    a.breaker_state, a.classified_from_http, a.is_leaf, a.accepted,
    rs_late_success(a.outcome, a.end_time, a.request_deadline) AS late_success,
    a.terminal AS request_terminal
FROM all_attempt_facts a
WHERE a.logical_request_id IN (SELECT logical_request_id FROM ids)
ORDER BY a.logical_request_id, a.start_time, rs_layer_rank(a.layer), a.attempt_ordinal;
