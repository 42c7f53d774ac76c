-- The grain of the rollups of one build (retryscope.analytics.model._rollups), per
-- request: the hour it started (rs_rollup_hour), its tenant and operation, and the
-- routes it made an attempt on; rollup_requests.sql and rollup_cost.sql group on these.
CREATE OR REPLACE TEMP TABLE rollup_keys AS
SELECT
    f.h,
    rs_rollup_hour(f.started_at) AS hour,
    f.tenant,
    f.operation,
    r.routes
FROM all_request_facts f
LEFT JOIN (
    SELECT h,
           list(DISTINCT route_id ORDER BY route_id) FILTER (WHERE route_id IS NOT NULL)
               AS routes
    FROM all_attempt_facts
    GROUP BY h
) r ON r.h = f.h;
