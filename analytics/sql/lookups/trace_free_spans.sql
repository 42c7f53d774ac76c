-- The spans of trace $id that name no logical request (what its implicit requests are made
-- of: implicit_requests.sql), from the files $files, added to the `spans` of a drill-down.
INSERT INTO spans
SELECT * FROM spans_in($files) WHERE trace_id = $id AND logical_request_id IS NULL;
