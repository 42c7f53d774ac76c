-- Every violation and anomaly as rows: rule id, severity, request, trace, time, evidence.
-- $rules: a list of rule ids or NULL for all; $limit: at most this many rows (NULL: all);
-- $gap_ms/$min_requests: synchronized-retry clustering; $window_ms/$budget: retry-budget windows (macro finding_rows, sql/findings.sql).
SELECT rule_id, severity, logical_request_id, trace_id, span_id, time::TIMESTAMP_NS AS time,
       evidence::VARCHAR AS evidence
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget)
WHERE $rules IS NULL OR list_contains($rules, rule_id)
ORDER BY time, rule_id, logical_request_id, span_id
LIMIT $limit;
