-- Per route: attempts (all layers), requests touching it, successes, whether a fallback.
-- Requests are counted by a 64-bit hash of their id (far cheaper than the string).
SELECT
    route_id,
    count(*)::BIGINT AS attempts,
    count(DISTINCT hash(logical_request_id))::BIGINT AS logical_requests,
    count(*) FILTER (WHERE outcome = 'success')::BIGINT AS successes,
    coalesce(bool_or(is_fallback), FALSE) AS is_fallback
FROM attempt_facts
WHERE route_id IS NOT NULL
GROUP BY route_id
ORDER BY min(route_priority) NULLS LAST, route_id;
