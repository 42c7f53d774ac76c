-- Median attempt latency per route and layer of the in-scope attempts (doomed-dispatch
-- checks). A SELECT: retryscope.analytics._scope_facts stores it as all_route_latency
-- (every request, part of the model) or scoped_route_latency (filters), read through the
-- view route_latency.
SELECT route_id, layer, quantile_cont(duration_ms, 0.5) AS p50_ms
FROM attempt_facts
GROUP BY route_id, layer
