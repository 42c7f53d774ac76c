-- Retry clusters from different requests within $gap_ms (missing jitter).
SELECT * FROM retry_clusters($gap_ms, $min_requests) ORDER BY cluster_start;
