-- Receiver traffic per time window: repeats (retries, hedges, resends the receiver saw on
-- top of each request's first attempt) as a fraction of attempts, vs a retry budget.
SELECT * FROM load_windows($window_ms, $budget) ORDER BY window_start;
