-- Whether `spans` has client spans of a logical request without a retryscope role: those
-- base_http_attempts.sql may classify as transport attempts.
SELECT EXISTS (
    SELECT 1 FROM spans
    WHERE span_role IS NULL AND kind = 'CLIENT' AND logical_request_id IS NOT NULL
);
