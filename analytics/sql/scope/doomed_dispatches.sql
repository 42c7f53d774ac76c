-- The in-scope attempts dispatched with less time left than the median latency of their
-- route and layer over the scope (route_latency.sql), with what their finding shows. A
-- SELECT, stored by retryscope.analytics._scope_facts as all_doomed_dispatches (every
-- request: after the model's per-request tables, over all of them) or
-- scoped_doomed_dispatches, read through the view doomed_dispatches: the request_facts
-- view counts them per request and findings.sql lists them.
SELECT a.h, a.logical_request_id, a.trace_id, a.span_id, a.start_time, a.route_id, a.layer,
       a.deadline_remaining_ms, l.p50_ms
FROM attempt_facts a
JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
WHERE a.deadline_remaining_ms < l.p50_ms
