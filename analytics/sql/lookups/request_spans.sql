-- The rows of the logical request with id $id, from the files $files that hold them
-- (request_files.sql), as a connection-local table `spans` that hides the data set's view,
-- so base.sql and scope.sql compute that request alone.
CREATE OR REPLACE TEMP TABLE spans AS
SELECT * FROM spans_in($files) WHERE logical_request_id = $id;
