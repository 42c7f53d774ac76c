-- The spans of trace $id that name no logical request, from the files $files that may hold
-- it, added to the `spans` of a drill-down: a process that carried the request's W3C trace
-- context only (model_http_attempts.sql joins it through its trace parent) and the trace's
-- implicit requests (implicit_requests.sql).
INSERT INTO spans
SELECT * FROM spans_in($files) WHERE trace_id = $id AND logical_request_id IS NULL;
