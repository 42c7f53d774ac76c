-- Receiver traffic per time window and slice ($dim: a Dimension value; `value` is 'all'
-- overall): repeats (retries, hedges, resends the receiver saw on top of each request's
-- first attempt) as a fraction of attempts, vs a retry budget.
SELECT * FROM load_windows_by($window_ms, $budget, $min_retries, $dim) ORDER BY value NULLS LAST, window_start;
