-- Fallback per slice (request level: entry route/release, tenant, operation, retry owner):
-- a request's fallback and its answer are request_facts.sql's (has_fallback,
-- fallback_success; rs_fallback_requests, rs_fallback_rate), the answer's quality
-- rs_fallback_quality, rs_fallback_degraded and rs_fallback_unverified (macros.sql).
SELECT
    rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
        AS value,
    count(*)::BIGINT AS logical_requests,
    rs_fallback_requests(has_fallback)::BIGINT AS requests_with_fallback,
    rs_fallback_rate(rs_fallback_requests(has_fallback), count(*)) AS fallback_rate,
    count(*) FILTER (WHERE fallback_success)::BIGINT AS fallback_successes,
    rs_ratio(count(*) FILTER (WHERE fallback_success), rs_fallback_requests(has_fallback))
        AS fallback_success_rate,
    count(*) FILTER (WHERE fallback_success AND rs_fallback_quality(
        fallback_capability_bound, fallback_behavior_bound, fallback_boundary_allowed))::BIGINT
        AS quality_fallback_successes,
    rs_ratio(count(*) FILTER (WHERE fallback_success AND rs_fallback_quality(
                 fallback_capability_bound, fallback_behavior_bound, fallback_boundary_allowed)),
             count(*) FILTER (WHERE fallback_success)) AS fallback_quality,
    count(*) FILTER (WHERE fallback_success AND rs_fallback_degraded(
        fallback_capability_bound, fallback_behavior_bound, fallback_boundary_allowed))::BIGINT
        AS degraded_fallbacks,
    count(*) FILTER (WHERE fallback_success AND rs_fallback_unverified(
        fallback_capability_bound, fallback_behavior_bound, fallback_boundary_allowed))::BIGINT
        AS unverified_fallbacks,
    count(*) FILTER (WHERE boundary_widened)::BIGINT AS boundary_widened_requests
FROM request_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
