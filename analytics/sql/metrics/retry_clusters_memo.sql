-- The scope's retry clusters for one pair of thresholds, kept until the scope or the
-- thresholds change (retryscope.analytics._metrics.ensure_retry_clusters): the report's
-- synchronized-retries figures and its findings read the same clusters, computed once.
CREATE OR REPLACE TEMP TABLE memo_retry_clusters AS
SELECT * FROM retry_clusters($gap_ms, $min_requests);
