-- The first of the model's per-request scripts (the order is kept in
-- retryscope.analytics.model._scripts), over whatever `spans` names: one time partition of
-- the data set, the requests straddling partitions, the whole data set, or one request's
-- rows for a drill-down. Temp tables: DuckDB plans a deep view chain slowly, and every
-- report query would recompute it.
--
-- Every table of the model carries `h`, a 64-bit hash of the logical request id: requests
-- are grouped and joined on it (far cheaper than on the id string), and the model of a
-- set of partitions replaces the rows of a request by h.

-- Every physical attempt, built in three steps over one table `attempt_rows` (scanning
-- the Parquet files once; joins between span sets run on the in-memory rows):
-- 1. spans marked as attempts (the request's tenant, operation and digests are
--    request_base's: per attempt they would only cost memory);
CREATE OR REPLACE TEMP TABLE attempt_rows AS
SELECT
    rs_request_key(logical_request_id) AS h,
    logical_request_id, trace_id, span_id, parent_span_id,
    start_time, end_time, duration_ms,
    -- an attempt is (continuation, layer, ordinal) within its request: a continuation in
    -- another process numbers its attempts on its own (NULL: the request's own process);
    -- its parent is (parent_continuation, parent_layer, parent_attempt_ordinal)
    layer, attempt_ordinal, parent_layer, parent_attempt_ordinal,
    continuation, parent_continuation,
    route_id, route_release, route_priority, is_fallback,
    route_capability_digest, route_behavior_class, route_data_boundary,
    backoff_delay_ms, retry_after_ms, not_before, deadline, deadline_remaining_ms,
    cost_reserved_micros, cost_actual_micros, cost_currency, cost_estimated,
    -- a foreign span taken for a send: by its HTTP status, or its gRPC status code
    coalesce(outcome, rs_send_outcome(
        http_method, http_status_code, status_code, idempotency_digest IS NOT NULL,
        TRY_CAST(attributes['rpc.grpc.status_code'] AS INTEGER))) AS outcome,
    coalesce(outcome_kind, CASE WHEN outcome IS NULL THEN rs_send_outcome_kind(
        http_method, http_status_code, status_code, idempotency_digest IS NOT NULL,
        TRY_CAST(attributes['rpc.grpc.status_code'] AS INTEGER)) END) AS outcome_kind,
    decision, retry_owner,
    http_status_code, hedge_ordinal, hedge_result = 'cancelled' AS hedge_cancelled,
    breaker_state, lower_max_retries,
    -- a send's operation under its parent attempt, the layer whose retry made a resend and
    -- the caller's try of the operation (instrumentation/_sends.py decides them: the body
    -- digest and whether the earlier send failed are the recorder's); NULL on attempts
    -- that are not sends
    operation_ordinal, retry_layer, operation_try,
    -- the attempts a gateway behind a send reports for its response (reported, not seen)
    gateway_attempts,
    FALSE AS classified_from_http
FROM spans
WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL;

-- 2. an attempt that does not name its enclosing attempt but whose parent span is one
-- (e.g. a transport attempt marked by an HTTP instrumentation) gets it from the span
-- tree; the context API and the stamping processor stamp parent_layer and
-- parent_attempt_ordinal, so this usually matches nothing. Only an attempt of the same
-- logical request encloses it: nesting is counted within one request (a sub-request's
-- attempts beneath another request's attempt are that sub-request's own top level), and
-- the model can then be built for any set of whole requests;
UPDATE attempt_rows AS c
SET parent_layer = t.parent_layer, parent_attempt_ordinal = t.parent_attempt_ordinal,
    parent_continuation = t.parent_continuation
FROM (
    SELECT c.rowid AS r, any_value(p.layer) AS parent_layer,
           any_value(p.attempt_ordinal) AS parent_attempt_ordinal,
           any_value(p.continuation) AS parent_continuation
    FROM attempt_rows c
    JOIN attempt_rows p
      ON p.h = c.h AND p.span_id = c.parent_span_id AND p.trace_id = c.trace_id
     AND p.logical_request_id = c.logical_request_id
    WHERE c.parent_layer IS NULL AND c.parent_span_id IS NOT NULL
    GROUP BY c.rowid
) t
WHERE c.rowid = t.r;
