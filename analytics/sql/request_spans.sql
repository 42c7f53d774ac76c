-- The rows of the logical request with id $id, for a drill-down: a connection-local table
-- `spans` that hides the data set's view, so base.sql and scope.sql compute that request
-- alone. An equality on the sort column lets Parquet row-group statistics skip the rest.
CREATE OR REPLACE TEMP TABLE spans AS
SELECT * FROM main.spans WHERE logical_request_id = $id;
