-- The logical requests with rows of trace id $id, among the files $files (those whose
-- statistics and Bloom filters admit $id).
SELECT DISTINCT logical_request_id FROM span_ids_in($files)
WHERE trace_id = $id AND logical_request_id IS NOT NULL;
