-- Whether `spans` has client spans without a retryscope role that model_http_attempts.sql
-- may classify as transport attempts: of a logical request, or of none but beneath another
-- span (maybe of a request's trace: another process that carried its trace context only).
SELECT EXISTS (
    SELECT 1 FROM spans
    WHERE span_role IS NULL AND kind = 'CLIENT'
      AND (logical_request_id IS NOT NULL OR parent_span_id IS NOT NULL)
);
