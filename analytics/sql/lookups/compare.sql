-- A slice of the scope against the rest of it (its baseline), every dimension's values
-- (memo_compare_totals, per request memo_compare_keys: compare_values_memo.sql) ranked by
-- how much more often the slice's requests take them: selected_share (of the slice's
-- requests) minus baseline_share (of the others'). Dimensions come in the order of their
-- largest difference, values by theirs. The slice: the Requests explorer query $terminal …
-- $violations (request_rows_matching.sql) over requests started in [$since, $until)
-- (NULL: unbounded).
-- (compare_requests.sql lists the slice's requests taking one value.)
WITH picked AS (
    SELECT h
    FROM request_rows_matching($terminal, $rule, $layer, $min_receiver_attempts, $retried,
                               $fallback, $deadline_missed, $nested, $wasted, $violations,
                               $where_dimension, $where_value)
    WHERE ($since IS NULL OR started_at >= $since) AND ($until IS NULL OR started_at < $until)
),
-- memo_request_rows: one row per request_facts row, kept in memory
sizes AS (
    SELECT n AS selected, (SELECT count(*) FROM memo_request_rows) - n AS baseline
    FROM (SELECT count(*) AS n FROM picked)
),
-- one side's values only (memo_compare_totals holds every request's, the other side is the
-- rest): the smaller side's rows of memo_compare_keys, their values' integer keys counted
chosen AS (
    SELECT k, count(*) AS requests
    FROM (
        SELECT unnest(v.keys) AS k
        FROM memo_compare_keys v
        WHERE (v.h IN (SELECT h FROM picked)) = (SELECT selected <= baseline FROM sizes)
    )
    GROUP BY k
),
selected AS (
    SELECT t.dimension, t.value, t.requests,
           CASE WHEN (SELECT selected <= baseline FROM sizes) THEN coalesce(c.requests, 0)
                ELSE t.requests - coalesce(c.requests, 0) END AS selected_requests
    FROM memo_compare_totals t
    LEFT JOIN chosen c ON c.k = t.k
),
counts AS (
    SELECT dimension, value, selected_requests, requests - selected_requests AS baseline_requests
    FROM selected
),
ranked AS (
    SELECT c.dimension, c.value,
           c.selected_requests::BIGINT AS selected_requests,
           c.baseline_requests::BIGINT AS baseline_requests,
           s.selected::BIGINT AS selected, s.baseline::BIGINT AS baseline,
           rs_ratio(c.selected_requests, s.selected) AS selected_share,
           rs_ratio(c.baseline_requests, s.baseline) AS baseline_share
    FROM counts c, sizes s
)
SELECT *, selected_share - baseline_share AS difference
FROM ranked
ORDER BY max(abs(selected_share - baseline_share)) OVER (PARTITION BY dimension) DESC,
         dimension,
         abs(selected_share - baseline_share) DESC,
         value;
