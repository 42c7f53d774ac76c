-- Receiver traffic per time window, not sliced (load.sql with $dim 'overall'), as
-- load_windows_memo.sql computed it for the current scope and thresholds.
SELECT * FROM memo_load_windows ORDER BY value NULLS LAST, window_start;
