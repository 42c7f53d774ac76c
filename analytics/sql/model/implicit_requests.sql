-- Implicit logical requests: where the application opened no logical request, the
-- outermost logical operation above a send is one (the rule every report, finding,
-- drill-down and UI query reads, through the `spans` this script defines). Run by
-- retryscope.analytics.model._partition.build_tables over `recorded_spans` (the spans being
-- built, one copy of each) when some client span belongs to no logical request
-- (free_client_spans.sql); otherwise `spans` is `recorded_spans` as it is.
--
-- Only spans of no logical request and no retryscope role take part ("free" spans), in
-- trees that hang from no recorded span: a send in an explicit logical request, or beneath
-- one of its spans in another process, belongs to it alone, so a trace with both counts
-- each send once.
-- * A send is a client span with an HTTP method or of gRPC, or a client call span
--   (rs_call_span: a GenAI operation, a known SDK's call), with no such span beneath it:
--   a send seen by two instrumentations (a contrib HTTP span around retryscope's) is the
--   innermost one, once.
-- * Its logical request is its outermost ancestor that is a logical operation — a GenAI
--   operation (the GenAI conventions' logical operation, its retries included), a client
--   call span, a SERVER span's handling — else the root of its free spans.
-- * Its call is its innermost call span below that (or that one itself), else its
--   outermost HTTP client span below it (a requests span around urllib3's sends): one
--   operation whose sends are its tries. A send without a call is an operation of its
--   own unless the client's evidence (`http.request.resend_count` > 0) says it repeats the
--   one before.
-- * The request span gets role logical_request (terminal `complete` when its last send
--   succeeded, else none: plain spans do not say why a client stopped). Its outermost
--   attempt, the application's one try, is the request span itself: as a call (layer
--   `sdk`) when it is one, as a `harness` attempt when it is neither call nor send (a
--   SERVER span, a root), with the calls beneath it. Each call's sends are transport
--   attempts beneath it, numbered in start order, their operation the call's. Every other
--   free span beneath the request gets its id (the drill-down's tree). A span that is
--   both the request and its attempt gives two rows.
CREATE OR REPLACE TEMP TABLE implicit_spans AS
WITH RECURSIVE
free AS (
    SELECT
        trace_id, span_id, parent_span_id, start_time, name, gen_ai_operation_name,
        http_resend_count,
        rs_call_span(kind, scope_name, gen_ai_operation_name) AS is_call,
        kind = 'CLIENT'
            AND (coalesce(http_method, json_extract_string(attributes['http.method'], '$'))
                     IS NOT NULL
                 OR json_extract_string(attributes['rpc.system'], '$') = 'grpc') AS is_send,
        kind = 'SERVER' OR gen_ai_operation_name IS NOT NULL
            OR rs_call_span(kind, scope_name, gen_ai_operation_name) AS is_operation,
        rs_send_outcome(
            coalesce(http_method, json_extract_string(attributes['http.method'], '$')),
            http_status_code, status_code, FALSE,
            TRY_CAST(attributes['rpc.grpc.status_code'] AS INTEGER)) AS outcome,
        rs_send_outcome_kind(
            coalesce(http_method, json_extract_string(attributes['http.method'], '$')),
            http_status_code, status_code, FALSE,
            TRY_CAST(attributes['rpc.grpc.status_code'] AS INTEGER)) AS outcome_kind
    FROM recorded_spans
    WHERE logical_request_id IS NULL AND span_role IS NULL
),
-- down every tree of free spans: per span, of itself and its ancestors, the root, the
-- outermost logical operation (anchor), the innermost call span, the outermost HTTP
-- client span at or below the anchor (wrapper), the nearest send or call span; and the
-- parent's values of the last four (its ancestors' alone)
walk(trace_id, span_id, root, anchor, call, wrapper, nearest,
     p_anchor, p_call, p_wrapper, p_nearest, depth) AS (
    SELECT
        f.trace_id, f.span_id, f.span_id,
        CASE WHEN f.is_operation THEN f.span_id END,
        CASE WHEN f.is_call THEN f.span_id END,
        CASE WHEN f.is_send THEN f.span_id END,
        CASE WHEN f.is_send OR f.is_call THEN f.span_id END,
        NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, 0
    FROM free f
    -- a tree of free spans hangs from no span at all: free spans beneath a span of an
    -- explicit request are a process that carried its trace context only, which
    -- model_http_attempts.sql joins to that request through the trace parent
    ANTI JOIN recorded_spans p ON p.trace_id = f.trace_id AND p.span_id = f.parent_span_id
    UNION ALL
    SELECT
        c.trace_id, c.span_id, w.root,
        coalesce(w.anchor, CASE WHEN c.is_operation THEN c.span_id END),
        CASE WHEN c.is_call THEN c.span_id ELSE w.call END,
        CASE WHEN w.anchor IS NULL AND c.is_operation
             THEN CASE WHEN c.is_send THEN c.span_id END
             ELSE coalesce(w.wrapper, CASE WHEN c.is_send THEN c.span_id END) END,
        CASE WHEN c.is_send OR c.is_call THEN c.span_id ELSE w.nearest END,
        w.anchor, w.call, w.wrapper, w.nearest, w.depth + 1
    FROM walk w
    JOIN free c ON c.trace_id = w.trace_id AND c.parent_span_id = w.span_id
    WHERE w.depth < 256
),
placed AS (
    SELECT w.*, f.* EXCLUDE (trace_id, span_id, parent_span_id)
    FROM walk w
    JOIN free f ON f.trace_id = w.trace_id AND f.span_id = w.span_id
),
-- the sends: send and call spans with none beneath them, with their request and call
sends AS (
    SELECT
        s.trace_id, s.span_id, s.start_time, s.http_resend_count, s.outcome, s.outcome_kind,
        coalesce(s.anchor, s.root) AS request_span,
        CASE WHEN s.anchor IS NOT NULL AND s.p_anchor IS NULL THEN NULL  -- the request itself
             ELSE coalesce(s.p_call, s.p_wrapper) END AS call
    FROM placed s
    ANTI JOIN (
        SELECT DISTINCT trace_id, p_nearest FROM placed WHERE is_send OR is_call
    ) b ON b.trace_id = s.trace_id AND b.p_nearest = s.span_id
    WHERE s.is_send OR s.is_call
),
-- operations: a call's sends are one; a send without a call starts one unless it repeats
-- the one before (by the client's own evidence)
runs AS (
    SELECT *,
           coalesce(call, 'send ' || sum(CASE WHEN coalesce(http_resend_count, 0) = 0
                                             THEN 1 ELSE 0 END) OVER (
               PARTITION BY trace_id, request_span, call IS NULL
               ORDER BY start_time, span_id)) AS operation_key
    FROM sends
),
numbered AS (
    SELECT *,
           rs_implicit_request_id(trace_id, request_span) AS id,
           (row_number() OVER (PARTITION BY trace_id, request_span
                               ORDER BY start_time, span_id))::INTEGER AS ordinal,
           min(start_time) OVER (PARTITION BY trace_id, request_span, operation_key)
               AS operation_start
    FROM runs
),
operations AS (
    SELECT *,
           (dense_rank() OVER (PARTITION BY trace_id, request_span
                               ORDER BY operation_start, operation_key))::INTEGER
               AS operation_ordinal
    FROM numbered
),
calls AS (
    SELECT
        trace_id, call AS span_id, any_value(id) AS id,
        any_value(operation_ordinal) AS operation_ordinal,
        -- its last send's (a struct: arg_max skips a NULL argument)
        arg_max({o: outcome, k: outcome_kind}, {t: start_time, s: span_id}) AS last
    FROM operations
    WHERE call IS NOT NULL
    GROUP BY trace_id, call
),
numbered_calls AS (
    SELECT c.* EXCLUDE (last), c.last.o AS outcome, c.last.k AS outcome_kind, p.is_call,
           (row_number() OVER (PARTITION BY c.id ORDER BY p.start_time, c.span_id))::INTEGER
               AS ordinal
    FROM calls c
    JOIN placed p ON p.trace_id = c.trace_id AND p.span_id = c.span_id
),
-- a request completed when its last send succeeded (otherwise how it stopped is not
-- known); its span is its outermost attempt too when it is neither a call nor a send (a
-- SERVER span's handling, a root span): the application's one try, layer `harness`
requests AS (
    SELECT o.trace_id, o.request_span AS span_id, any_value(o.id) AS id,
           any_value(coalesce(p.gen_ai_operation_name, p.name)) AS operation,
           CASE WHEN arg_max({o: o.outcome}, {t: o.start_time, s: o.span_id}).o = 'success'
                THEN 'complete' END AS terminal,
           arg_max({o: o.outcome, k: o.outcome_kind}, {t: o.start_time, s: o.span_id}) AS last,
           NOT any_value(p.is_call OR p.is_send) AS is_harness
    FROM operations o
    JOIN placed p ON p.trace_id = o.trace_id AND p.span_id = o.request_span
    GROUP BY o.trace_id, o.request_span
),
stamped AS (
    -- the request spans
    SELECT trace_id, span_id, id AS logical_request_id,
           'logical_request' AS span_role, NULL::VARCHAR AS layer,
           NULL::INTEGER AS attempt_ordinal, NULL::VARCHAR AS parent_layer,
           NULL::INTEGER AS parent_attempt_ordinal, NULL::INTEGER AS operation_ordinal,
           NULL::VARCHAR AS retry_layer, NULL::VARCHAR AS outcome,
           NULL::VARCHAR AS outcome_kind, operation, terminal
    FROM requests
    UNION ALL
    -- the application's try, where the request span is not a call
    SELECT trace_id, span_id, id, 'attempt', 'harness', 1, NULL, NULL, NULL, NULL,
           last.o, last.k, NULL, NULL
    FROM requests
    WHERE is_harness
    UNION ALL
    -- the calls
    SELECT c.trace_id, c.span_id, c.id, 'attempt', 'sdk', c.ordinal,
           CASE WHEN r.is_harness THEN 'harness' END, CASE WHEN r.is_harness THEN 1 END,
           c.operation_ordinal, NULL, c.outcome, c.outcome_kind, NULL, NULL
    FROM numbered_calls c
    JOIN requests r ON r.id = c.id
    UNION ALL
    -- the sends: beneath their call, else beneath the application's try
    SELECT o.trace_id, o.span_id, o.id, 'attempt', 'transport', o.ordinal,
           CASE WHEN c.span_id IS NOT NULL THEN 'sdk' WHEN r.is_harness THEN 'harness' END,
           CASE WHEN c.span_id IS NOT NULL THEN c.ordinal WHEN r.is_harness THEN 1 END,
           o.operation_ordinal,
           CASE WHEN c.is_call THEN 'sdk' WHEN c.span_id IS NOT NULL THEN 'transport' END,
           o.outcome, o.outcome_kind, NULL, NULL
    FROM operations o
    JOIN requests r ON r.id = o.id
    LEFT JOIN numbered_calls c ON c.trace_id = o.trace_id AND c.span_id = o.call
),
-- every other free span beneath a request
members AS (
    SELECT p.trace_id, p.span_id, r.id
    FROM placed p
    JOIN requests r ON r.trace_id = p.trace_id AND r.span_id = coalesce(p.anchor, p.root)
    ANTI JOIN stamped s ON s.trace_id = p.trace_id AND s.span_id = p.span_id
)
SELECT * FROM stamped
UNION ALL BY NAME
SELECT trace_id, span_id, id AS logical_request_id FROM members;

-- The spans every later script reads: the implicit requests' stamped on the free spans.
CREATE OR REPLACE TEMP VIEW spans AS
SELECT s.* REPLACE (
    coalesce(i.logical_request_id, s.logical_request_id) AS logical_request_id,
    coalesce(i.span_role, s.span_role) AS span_role,
    coalesce(i.layer, s.layer) AS layer,
    coalesce(i.attempt_ordinal, s.attempt_ordinal) AS attempt_ordinal,
    coalesce(i.parent_layer, s.parent_layer) AS parent_layer,
    coalesce(i.parent_attempt_ordinal, s.parent_attempt_ordinal) AS parent_attempt_ordinal,
    coalesce(i.operation_ordinal, s.operation_ordinal) AS operation_ordinal,
    coalesce(i.retry_layer, s.retry_layer) AS retry_layer,
    coalesce(i.outcome, s.outcome) AS outcome,
    coalesce(i.outcome_kind, s.outcome_kind) AS outcome_kind,
    coalesce(i.operation, s.operation) AS operation,
    coalesce(i.terminal, s.terminal) AS terminal
)
FROM recorded_spans s
LEFT JOIN implicit_spans i ON i.trace_id = s.trace_id AND i.span_id = s.span_id;
