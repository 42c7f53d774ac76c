-- The model's second per-request script (after model_attempts.sql), run only when `spans`
-- has HTTP client spans without a role (unmarked_http_spans.sql): planning it is the
-- costliest of a drill-down's statements (≈ 9 ms), and its scan costs a partition's build.

-- HTTP client spans no processor marked, in current or older HTTP semantic conventions
-- (`http.method`/`http.status_code` stay in the attributes map).
CREATE OR REPLACE TEMP VIEW http_client_spans AS
SELECT * FROM (
    SELECT * REPLACE (
        coalesce(http_method, json_extract_string(attributes['http.method'], '$'))
            AS http_method,
        coalesce(http_status_code, TRY_CAST(attributes['http.status_code'] AS INTEGER))
            AS http_status_code
    )
    FROM spans
    WHERE span_role IS NULL AND kind = 'CLIENT'
)
WHERE http_method IS NOT NULL;

-- 3. HTTP client spans that an HTTP instrumentation made inside an attempt without
-- marking them, classified as transport attempts beneath their innermost enclosing
-- attempt.
INSERT INTO attempt_rows BY NAME
WITH
-- HTTP client spans under a logical request
http AS (
    SELECT *, rs_request_key(logical_request_id) AS h
    FROM http_client_spans
    WHERE logical_request_id IS NOT NULL
),
-- the innermost enclosing attempt: the parent span when it is one, else the deepest
-- attempt of the stamped ordinal and route whose time span contains the HTTP span
candidates AS (
    SELECT
        h.trace_id AS http_trace_id, h.span_id AS http_span_id,
        a.layer, a.attempt_ordinal, a.continuation, a.route_release, a.route_priority,
        a.is_fallback,
        a.route_capability_digest, a.route_behavior_class, a.route_data_boundary,
        a.retry_owner, a.deadline,
        (a.span_id = h.parent_span_id, rs_layer_rank(a.layer)) AS preference
    FROM http h
    JOIN (
        SELECT *
        FROM attempt_rows
        WHERE h IN (SELECT h FROM http)
    ) a
      ON a.h = h.h AND a.logical_request_id = h.logical_request_id
     AND a.attempt_ordinal = h.attempt_ordinal
     AND a.continuation IS NOT DISTINCT FROM h.continuation
     AND a.route_id IS NOT DISTINCT FROM h.route_id
     AND (a.span_id = h.parent_span_id
          OR (a.start_time <= h.start_time AND a.end_time >= h.end_time))
),
enclosing AS (
    SELECT
        http_trace_id AS trace_id, http_span_id AS span_id,
        arg_max(layer, preference) AS parent_layer,
        arg_max(attempt_ordinal, preference) AS parent_attempt_ordinal,
        arg_max(continuation, preference) AS parent_continuation,
        arg_max(route_release, preference) AS route_release,
        arg_max(route_priority, preference) AS route_priority,
        arg_max(is_fallback, preference) AS is_fallback,
        arg_max(route_capability_digest, preference) AS route_capability_digest,
        arg_max(route_behavior_class, preference) AS route_behavior_class,
        arg_max(route_data_boundary, preference) AS route_data_boundary,
        arg_max(retry_owner, preference) AS retry_owner,
        arg_max(deadline, preference) AS deadline
    FROM candidates
    GROUP BY http_trace_id, http_span_id
)
SELECT
    h.h, h.logical_request_id, h.trace_id, h.span_id, h.parent_span_id,
    h.start_time, h.end_time, h.duration_ms,
    'transport' AS layer,
    (row_number() OVER (
        PARTITION BY h.h ORDER BY h.start_time, h.span_id))::INTEGER
        AS attempt_ordinal,
    e.parent_layer, e.parent_attempt_ordinal, e.parent_continuation,
    h.route_id, e.route_release, e.route_priority, e.is_fallback,
    e.route_capability_digest, e.route_behavior_class, e.route_data_boundary,
    h.backoff_delay_ms, h.retry_after_ms, h.not_before,
    coalesce(h.deadline, e.deadline) AS deadline, h.deadline_remaining_ms,
    h.cost_reserved_micros, h.cost_actual_micros, h.cost_currency, h.cost_estimated,
    rs_http_outcome(h.http_status_code, h.status_code, h.idempotency_digest IS NOT NULL)
        AS outcome,
    rs_http_outcome_kind(h.http_status_code, h.status_code, h.idempotency_digest IS NOT NULL)
        AS outcome_kind,
    h.decision, coalesce(h.retry_owner, e.retry_owner) AS retry_owner,
    h.http_status_code, h.hedge_ordinal, h.hedge_result = 'cancelled' AS hedge_cancelled,
    h.breaker_state,
    h.lower_max_retries,
    TRUE AS classified_from_http
FROM http h
JOIN enclosing e ON e.trace_id = h.trace_id AND e.span_id = h.span_id
WHERE e.parent_layer <> 'transport';  -- inside a marked transport attempt: not another one

-- 4. HTTP client spans of no logical request in a request's trace (another process that
-- continued the trace with W3C trace context alone, a contrib instrumentation marking its
-- sends): the trace parent decides, once, here. Each joins the request of its nearest
-- ancestor span that is an attempt (the send that carried the trace context, or the
-- attempt it was injected in) as a send beneath that attempt, whatever spans of no request
-- lie between (the other process's server span). The spans of such a process beneath one
-- attempt are a continuation of their own, named by the span that entered it, so their
-- sends are numbered apart from every other process's.
INSERT INTO attempt_rows BY NAME
WITH RECURSIVE
sends AS (
    SELECT trace_id, span_id, parent_span_id
    FROM http_client_spans
    WHERE logical_request_id IS NULL AND parent_span_id IS NOT NULL
),
-- the other spans of no request in those sends' traces (few: a request's are stamped); a
-- send is not passed through: one beneath it is its own lower layer's span of the same
-- send, as in a request's process
unowned AS (
    SELECT trace_id, span_id, parent_span_id
    FROM spans
    WHERE logical_request_id IS NULL AND parent_span_id IS NOT NULL
      AND trace_id IN (SELECT trace_id FROM sends)
      AND (trace_id, span_id) NOT IN (SELECT (trace_id, span_id) FROM sends)
),
-- from each such send up through unowned spans: `up` the next ancestor, `entry` the last
-- unowned span passed
walk AS (
    SELECT trace_id, span_id, parent_span_id AS up, span_id AS entry, 1 AS depth
    FROM sends
    UNION ALL
    SELECT w.trace_id, w.span_id, u.parent_span_id, u.span_id, w.depth + 1
    FROM walk w
    JOIN unowned u ON u.trace_id = w.trace_id AND u.span_id = w.up
    WHERE w.depth < 64
),
adopted AS (
    SELECT w.trace_id, w.span_id, w.entry, p.rowid AS parent_row
    FROM walk w
    JOIN attempt_rows p ON p.trace_id = w.trace_id AND p.span_id = w.up
)
SELECT
    p.h, p.logical_request_id, s.trace_id, s.span_id, s.parent_span_id,
    s.start_time, s.end_time, s.duration_ms,
    'transport' AS layer,
    (row_number() OVER (
        PARTITION BY p.h, a.entry ORDER BY s.start_time, s.span_id))::INTEGER
        AS attempt_ordinal,
    p.layer AS parent_layer, p.attempt_ordinal AS parent_attempt_ordinal,
    a.entry AS continuation, p.continuation AS parent_continuation,
    p.route_id, p.route_release, p.route_priority, p.is_fallback,
    p.route_capability_digest, p.route_behavior_class, p.route_data_boundary,
    p.deadline, p.retry_owner,
    rs_http_outcome(s.http_status_code, s.status_code, FALSE) AS outcome,
    rs_http_outcome_kind(s.http_status_code, s.status_code, FALSE) AS outcome_kind,
    s.http_status_code,
    TRUE AS classified_from_http
FROM adopted a
JOIN http_client_spans s ON s.trace_id = a.trace_id AND s.span_id = a.span_id
JOIN attempt_rows p ON p.rowid = a.parent_row;

DROP VIEW http_client_spans;
