-- When the data set's logical requests started (filters not applied).
SELECT
    min(started_at) AS first_started_at,
    max(started_at) AS last_started_at,
    count(*)::BIGINT AS logical_requests
FROM request_base;
