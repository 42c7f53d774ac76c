-- When the logical requests of the current scope started (the filters applied): the span
-- a chart of the scope over time covers.
SELECT
    min(started_at) AS first_started_at,
    max(started_at) AS last_started_at,
    count(*)::BIGINT AS logical_requests
FROM requests;
