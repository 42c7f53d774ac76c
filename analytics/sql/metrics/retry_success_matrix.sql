-- Success of retries by the failure kind that preceded them × their attempt ordinal, per
-- layer (retry_effectiveness.sql reports each on its own; a heatmap needs both at once).
SELECT
    layer,
    rs_after_kind(prev_kind, prev_outcome) AS after_kind,
    attempt_ordinal,
    count(*)::BIGINT AS retries,
    rs_successes(outcome)::BIGINT AS successes,
    rs_ratio(rs_successes(outcome), count(*)) AS success_rate
FROM attempt_facts
WHERE rs_retry_after_failure(is_retry, prev_outcome)
GROUP BY ALL
ORDER BY layer, after_kind, attempt_ordinal;
