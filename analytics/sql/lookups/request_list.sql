-- A page of the Requests explorer: the rows of request_rows_matching (request_rows_memo.sql)
-- sorted by $sort (a retryscope.analytics._browse.RequestSort value), $descending, then by
-- start and id; at most $limit rows.
WITH keyed AS (
    SELECT
        *,
        CASE $sort
            WHEN 'started_at' THEN epoch_us(started_at)::DOUBLE
            WHEN 'duration_ms' THEN duration_ms
            WHEN 'attempts' THEN attempts
            WHEN 'receiver_attempts' THEN receiver_attempts
            WHEN 'excess_attempts' THEN excess_attempts
            WHEN 'amplification_ratio' THEN amplification_ratio
            WHEN 'retry_product' THEN retry_product
            WHEN 'cost_micros' THEN cost_micros
            WHEN 'wasted_micros' THEN wasted_micros
            WHEN 'past_deadline_ms' THEN past_deadline_ms
            WHEN 'findings' THEN findings
        END AS number_key,
        CASE $sort
            WHEN 'terminal' THEN terminal
            WHEN 'tenant' THEN tenant
            WHEN 'operation' THEN operation
            WHEN 'route_path' THEN route_path
        END AS text_key
    FROM request_rows_matching($terminal, $rule, $layer, $min_receiver_attempts, $retried,
                               $fallback, $deadline_missed, $nested, $wasted, $violations,
                               $where_dimension, $where_value)
)
SELECT * EXCLUDE (number_key, text_key, h)
FROM keyed
ORDER BY
    CASE WHEN $descending THEN -number_key ELSE number_key END NULLS LAST,
    CASE WHEN $descending THEN text_key END DESC NULLS LAST,
    CASE WHEN NOT $descending THEN text_key END ASC NULLS LAST,
    started_at,
    logical_request_id
LIMIT $limit;
