-- The findings of one logical request ($id) as finding_list.sql lists them, over the
-- unfiltered scope (synchronized retries and doomed dispatches depend on other requests);
-- parameters as there. finding_rows keeps the request's rows before any window.
SELECT f.rule_id, c.severity, f.span_id, f.time::TIMESTAMP_NS AS time,
       f.evidence::VARCHAR AS evidence
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget, $min_retries, $id) f
LEFT JOIN finding_rules c ON c.rule_id = f.rule_id
ORDER BY f.time, f.rule_id, f.span_id;
