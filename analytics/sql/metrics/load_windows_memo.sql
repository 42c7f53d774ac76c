-- The scope's load windows (not sliced) for one window width and budget, kept until the
-- scope or the thresholds change (retryscope.analytics._metrics.ensure_load_windows): the
-- report's load figures and its retry-budget findings read the same windows, computed once.
CREATE OR REPLACE TEMP TABLE memo_load_windows AS
SELECT * FROM load_windows_by($window_ms, $budget, $min_retries, 'overall');
