-- The findings of one logical request ($id) as finding_list.sql lists them, over the
-- unfiltered scope (synchronized retries and retry storms depend on other requests);
-- parameters as there.
SELECT f.rule_id, c.severity, f.span_id, f.time::TIMESTAMP_NS AS time,
       f.evidence::VARCHAR AS evidence
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget) f
LEFT JOIN finding_rules c ON c.rule_id = f.rule_id
WHERE f.logical_request_id = $id
ORDER BY f.time, f.rule_id, f.span_id;
