-- How many findings each rule has (rules without findings are absent); parameters as in
-- finding_list.sql. Counting only lets DuckDB skip building the evidence of every row.
SELECT rule_id, count(*)::BIGINT AS n
FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget, $min_retries, NULL)
GROUP BY rule_id;
