-- Every violation and anomaly as rows: rule id, severity, request, trace, time, evidence.
-- $rule: one rule id or NULL for all; $gap_ms/$min_requests: synchronized-retry clustering;
-- $window_ms/$budget: retry-budget windows (macro finding_rows, sql/findings.sql).
SELECT rule_id, severity, logical_request_id, trace_id, span_id, time::TIMESTAMP_NS AS time,
       evidence::VARCHAR AS evidence
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget)
WHERE $rule IS NULL OR rule_id = $rule
ORDER BY time, rule_id, logical_request_id, span_id;
