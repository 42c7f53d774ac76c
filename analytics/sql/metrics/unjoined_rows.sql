-- Rows the figures cannot join to their logical request, by why (report `unjoined_rows`).
-- Over the whole data set (filters do not apply: a row without its request has none to
-- filter by):
-- * request_id_evicted, request_id_missing: spans stamped by retryscope without a logical
--   request id, evicted by their attribute count limit or never written (unjoined_spans,
--   model_checks.sql); no figure counts them;
-- * request_span_missing: attempts whose request id names no request span in the data set
--   (its process's spans lost, or not collected): counted in a request built from its
--   attempts alone, without the request's terminal, deadline or tenant.
SELECT
    count(*) FILTER (WHERE reason = 'request_id_evicted')::BIGINT AS request_id_evicted,
    count(*) FILTER (WHERE reason = 'request_id_missing')::BIGINT AS request_id_missing,
    (SELECT count(*) FROM physical_attempts a
     SEMI JOIN (SELECT h FROM request_base WHERE NOT has_request_span) r ON r.h = a.h
    )::BIGINT AS request_span_missing
FROM unjoined_spans;
