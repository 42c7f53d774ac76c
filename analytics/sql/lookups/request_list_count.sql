-- How many requests a Requests explorer query selects (request_list.sql without a limit).
SELECT count(*)::BIGINT AS n
FROM request_rows_matching($terminal, $rule, $layer, $min_receiver_attempts, $retried,
                           $fallback, $deadline_missed, $nested, $wasted, $violations,
                           $where_dimension, $where_value);
