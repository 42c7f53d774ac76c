-- The rows of the logical requests whose trace id or idempotency digest is $id (when no
-- logical request has id $id): a full scan of those two columns, then their requests' rows.
-- The empty table of request_spans.sql goes first: while it exists, `main.spans` names it.
DROP TABLE IF EXISTS temp.main.spans;
CREATE TEMP TABLE spans AS
SELECT * FROM main.spans
WHERE logical_request_id IN (
    SELECT logical_request_id FROM main.spans
    WHERE (trace_id = $id OR idempotency_digest = $id) AND logical_request_id IS NOT NULL
);
