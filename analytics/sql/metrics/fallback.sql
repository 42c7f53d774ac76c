-- Fallback per slice (request level: entry route/release, tenant, operation, retry owner).
-- Quality: fallback successes whose route binds the request's capability digest and
-- behavior class within an allowed data boundary. Degraded: capability and boundary hold,
-- behavior class differs. Unverified: the data lacks a digest/class/boundary to check.
SELECT
    rs_dim($dim, entry_route, entry_release, tenant, operation, retry_owner, started_at)
        AS value,
    count(*)::BIGINT AS logical_requests,
    count(*) FILTER (WHERE has_fallback)::BIGINT AS requests_with_fallback,
    rs_ratio(count(*) FILTER (WHERE has_fallback), count(*)) AS fallback_rate,
    count(*) FILTER (WHERE fallback_success)::BIGINT AS fallback_successes,
    rs_ratio(count(*) FILTER (WHERE fallback_success), count(*) FILTER (WHERE has_fallback))
        AS fallback_success_rate,
    count(*) FILTER (WHERE fallback_success AND fallback_capability_bound
                     AND fallback_behavior_bound AND fallback_boundary_allowed)::BIGINT
        AS quality_fallback_successes,
    rs_ratio(count(*) FILTER (WHERE fallback_success AND fallback_capability_bound
                              AND fallback_behavior_bound AND fallback_boundary_allowed),
             count(*) FILTER (WHERE fallback_success)) AS fallback_quality,
    count(*) FILTER (WHERE fallback_success AND fallback_capability_bound
                     AND fallback_boundary_allowed AND NOT fallback_behavior_bound)::BIGINT
        AS degraded_fallbacks,
    count(*) FILTER (WHERE fallback_success AND (fallback_capability_bound IS NULL
                     OR fallback_behavior_bound IS NULL
                     OR fallback_boundary_allowed IS NULL))::BIGINT AS unverified_fallbacks,
    count(*) FILTER (WHERE boundary_widened)::BIGINT AS boundary_widened_requests
FROM request_facts
GROUP BY ALL
ORDER BY value NULLS LAST;
