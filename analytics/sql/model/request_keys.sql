-- The logical requests a time partition holds spans of (`h`, any span naming one), each
-- with the unit it is built in (`u`): a request whose unit is found in two partitions
-- straddles them, and its unit's tables are built again from all their spans
-- (retryscope.analytics.model._build). A request is a unit of its own, but the implicit
-- requests of a trace are found from all its spans of no logical request together
-- (implicit_requests.sql), so their unit is the trace (rs_implicit_trace_key), also
-- named by those of its spans no implicit request took (`h` NULL).
CREATE OR REPLACE TEMP TABLE request_keys AS
SELECT DISTINCT
    rs_request_key(logical_request_id) AS h,
    CASE WHEN logical_request_id IS NULL OR rs_implicit(logical_request_id)
         THEN rs_implicit_trace_key(trace_id)
         ELSE rs_request_key(logical_request_id) END AS u
FROM spans
WHERE logical_request_id IS NOT NULL OR span_role IS NULL;
