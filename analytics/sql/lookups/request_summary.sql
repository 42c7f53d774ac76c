-- The logical requests $id names (logical request id, trace id or idempotency digest), with
-- their sends, resends and retry amplification (the report's figures for one request) and
-- how long past its deadline each ended (rs_past_deadline_ms).
SELECT
    r.logical_request_id, r.trace_id, r.tenant, r.operation, r.retry_owner,
    r.started_at, r.ended_at, r.deadline, r.terminal, r.idempotency_digest,
    r.logical_request_digest, r.has_request_span,
    r.entry_route, r.entry_boundary, r.max_data_boundary, r.required_behavior_class,
    r.required_capability_digest,
    coalesce(n.retried_layers, []) AS retried_layers,
    r.multiplication,
    r.operations,
    r.receiver_attempts,
    rs_resends(r.receiver_attempts, r.operations)::BIGINT AS excess_attempts,
    rs_amplification(r.receiver_attempts, r.operations) AS amplification_ratio,
    rs_past_deadline_ms(r.ended_at, r.deadline) AS past_deadline_ms
FROM all_request_facts r
LEFT JOIN all_request_nesting n ON n.h = r.h
WHERE r.logical_request_id = $id OR r.trace_id = $id OR r.idempotency_digest = $id
ORDER BY r.started_at, r.logical_request_id;
