-- Which of the files $files (those whose statistics and Bloom filters admit $id) hold rows
-- of the logical request with id $id; only the id column is read.
SELECT DISTINCT filename FROM span_ids_in($files) WHERE logical_request_id = $id ORDER BY filename;
