-- The requests of a comparison's slice (compare.sql: $terminal … $violations, $since,
-- $until) that take $value in $dimension (the request's keys, memo_compare_keys, hold that
-- value's, memo_compare_totals: compare_values_memo.sql): the Requests explorer's
-- rows, most excess attempts first, then latest; at most $limit, each with how many match.
SELECT m.* EXCLUDE (h), count(*) OVER () AS matching
FROM request_rows_matching($terminal, $rule, $layer, $min_receiver_attempts, $retried,
                           $fallback, $deadline_missed, $nested, $wasted, $violations,
                           $where_dimension, $where_value) m
SEMI JOIN (
    SELECT c.h FROM memo_compare_keys c
    WHERE list_contains(c.keys, (
        SELECT t.k FROM memo_compare_totals t WHERE t.dimension = $dimension AND t.value = $value
    ))
) v ON v.h = m.h
WHERE ($since IS NULL OR m.started_at >= $since) AND ($until IS NULL OR m.started_at < $until)
ORDER BY m.excess_attempts DESC, m.started_at DESC, m.logical_request_id
LIMIT $limit;
