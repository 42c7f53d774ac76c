-- Every violation and anomaly as rows: rule id, severity, request, trace, time, evidence.
-- $rules: a list of rule ids or NULL for all; $limit: at most this many rows (NULL: all);
-- $gap_ms/$min_requests: synchronized-retry clustering; $window_ms/$budget/$min_retries:
-- retry-budget windows (macro finding_rows, findings.sql). The severity is the rule catalog's
-- (finding_rules, registered from retryscope.analytics._findings.RULES).
SELECT f.rule_id, c.severity, f.logical_request_id, f.trace_id, f.span_id,
       f.time::TIMESTAMP_NS AS time, f.evidence::VARCHAR AS evidence
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget, $min_retries, NULL) f
LEFT JOIN finding_rules c ON c.rule_id = f.rule_id
WHERE $rules IS NULL OR list_contains($rules, f.rule_id)
ORDER BY f.time, f.rule_id, f.logical_request_id, f.span_id
LIMIT $limit;
