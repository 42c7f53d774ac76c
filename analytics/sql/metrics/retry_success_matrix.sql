-- Success of retries by the failure kind that preceded them × their attempt ordinal, per
-- layer (retry_effectiveness.sql reports each on its own; a heatmap needs both at once).
SELECT
    layer,
    coalesce(prev_kind, prev_outcome, 'unknown') AS after_kind,
    attempt_ordinal,
    count(*)::BIGINT AS retries,
    count(*) FILTER (WHERE outcome = 'success')::BIGINT AS successes,
    rs_ratio(count(*) FILTER (WHERE outcome = 'success'), count(*)) AS success_rate
FROM attempt_facts
WHERE is_retry AND coalesce(prev_outcome, '') <> 'success'
GROUP BY ALL
ORDER BY layer, after_kind, attempt_ordinal;
