-- Whether `recorded_spans` has client spans of no logical request and no retryscope role:
-- only then can there be implicit logical requests (implicit_requests.sql).
SELECT EXISTS (
    SELECT 1 FROM recorded_spans
    WHERE logical_request_id IS NULL AND span_role IS NULL AND kind = 'CLIENT'
);
