-- The in-scope attempts dispatched with less time left than the median latency of their
-- route and layer over the scope (route_latency.sql), with the median. A SELECT that
-- retryscope.analytics._scope_facts keeps as the view doomed_attempts (never stored: a
-- query reads only the columns it needs, so counting them per request leaves the ids
-- alone); doomed_dispatches.sql counts them per request, findings.sql lists them.
SELECT a.*, l.p50_ms
FROM attempt_facts a
JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
WHERE a.deadline_remaining_ms < l.p50_ms
