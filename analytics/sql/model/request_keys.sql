-- The logical requests a time partition holds spans of (any span naming one): a request
-- found in two partitions straddles them, and its tables are built again from all its
-- spans (retryscope.analytics.model._build).
CREATE OR REPLACE TEMP TABLE request_keys AS
SELECT DISTINCT rs_request_key(logical_request_id) AS h
FROM spans
WHERE logical_request_id IS NOT NULL;
