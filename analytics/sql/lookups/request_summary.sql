-- The logical requests $id names (logical request id, trace id or idempotency digest).
SELECT
    r.logical_request_id, r.trace_id, r.tenant, r.operation, r.retry_owner,
    r.started_at, r.ended_at, r.deadline, r.terminal, r.idempotency_digest,
    r.logical_request_digest, r.has_request_span,
    r.entry_route, r.entry_boundary, r.max_data_boundary, r.required_behavior_class,
    r.required_capability_digest,
    coalesce(n.retried_layers, []) AS retried_layers,
    coalesce(n.multiplication, 1) AS multiplication,
    coalesce(n.operations, 0) AS operations
FROM request_base r
LEFT JOIN all_request_nesting n ON n.h = r.h
WHERE r.logical_request_id = $id OR r.trace_id = $id OR r.idempotency_digest = $id
ORDER BY r.started_at, r.logical_request_id;
