-- Retry clusters from different requests within $gap_ms (missing jitter), as
-- retry_clusters_memo.sql computed them for the current scope and thresholds.
SELECT * FROM memo_retry_clusters ORDER BY cluster_start;
