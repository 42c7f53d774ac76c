-- Per in-scope request with any: its attempts dispatched with less time left than the
-- median latency of their route and layer over the scope (route_latency.sql). A SELECT,
-- stored by retryscope.analytics._scope_facts as all_doomed_dispatches (every request:
-- after the model's per-request tables, over all of them) or scoped_doomed_dispatches.
SELECT a.h, count(*) AS doomed_dispatches
FROM attempt_facts a
JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
WHERE a.deadline_remaining_ms < l.p50_ms
GROUP BY a.h
