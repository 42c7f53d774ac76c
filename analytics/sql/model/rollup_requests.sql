-- The requests' rollup of one build (retryscope.analytics.model._rollups): per key of
-- rollup_keys.sql, the additive parts of the headline figures, counted by the rules of
-- macros.sql over all_request_facts (request_facts.sql) as the report counts them. The
-- headline (sql/metrics/headline_requests.sql) sums them under the filters the grain
-- covers and divides them with the report's macros.
SELECT
    k.hour,
    k.tenant,
    k.operation,
    k.routes,
    count(*)::BIGINT AS logical_requests,
    sum(f.physical_attempts)::BIGINT AS physical_attempts,
    sum(f.receiver_attempts)::BIGINT AS receiver_attempts,
    sum(f.operations)::BIGINT AS operations,
    rs_fallback_requests(f.has_fallback)::BIGINT AS requests_with_fallback,
    rs_exhausted_requests(f.terminal)::BIGINT AS deadline_exhausted
FROM all_request_facts f
JOIN rollup_keys k ON k.h = f.h
GROUP BY ALL
