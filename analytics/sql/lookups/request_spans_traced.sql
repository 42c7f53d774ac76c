-- The rows of no logical request in trace $trace, from the files $files that may hold it,
-- added to the `spans` of request_spans.sql: the spans of a process that carried the
-- request's W3C trace context only, which model_http_attempts.sql joins to the request
-- through their trace parent.
INSERT INTO spans
SELECT * FROM spans_in($files) WHERE trace_id = $trace AND logical_request_id IS NULL;
