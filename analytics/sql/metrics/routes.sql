-- Per route, in priority order: the success rate of its attempts (all layers) and whether it
-- served as a fallback. Its attempts, requests and amplification are amplification.sql's
-- (by route), the one definition the report, the CLI and the UI share.
SELECT
    route_id,
    rs_ratio(rs_successes(outcome), count(*)) AS success_rate,
    coalesce(bool_or(is_fallback), FALSE) AS is_fallback
FROM attempt_facts
WHERE route_id IS NOT NULL
GROUP BY route_id
ORDER BY min(route_priority) NULLS LAST, route_id;
