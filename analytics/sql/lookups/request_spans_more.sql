-- The rows of one more logical request (an idempotency digest or trace id may name
-- several), added to the `spans` of request_spans.sql.
INSERT INTO spans
SELECT * FROM spans_in($files) WHERE logical_request_id = $id;
