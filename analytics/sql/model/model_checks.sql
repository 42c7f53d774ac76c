-- Telemetry checks, built with the model's per-request tables (and cached with them): each
-- depends on one span or on one request's own spans, so they are built for any set of
-- whole requests like the rest (the checks across requests are model_global.sql's).
-- Filters select whole requests, so findings.sql only selects the in-scope rows of these
-- (usually empty) tables instead of scanning every span and attempt again.

-- Spans no correct writer produces: malformed ids, time running backwards (any span but a
-- telemetry gap record, also those of no logical request: a foreign writer's).
CREATE OR REPLACE TEMP TABLE span_anomalies AS
SELECT rs_request_key(logical_request_id) AS h,
       logical_request_id, trace_id, span_id, name, start_time, end_time, problem
FROM (
    SELECT logical_request_id, trace_id, span_id, name, start_time, end_time,
           CASE
               WHEN NOT regexp_full_match(trace_id, '[0-9a-f]{32}') THEN 'bad_trace_id'
               WHEN NOT regexp_full_match(span_id, '[0-9a-f]{16}') THEN 'bad_span_id'
               WHEN NOT regexp_full_match(coalesce(parent_span_id, '0000000000000000'),
                                          '[0-9a-f]{16}') THEN 'bad_parent_span_id'
               WHEN end_time < start_time THEN 'end_before_start'
           END AS problem
    FROM spans
    WHERE span_role IS DISTINCT FROM 'telemetry_gap'
)
WHERE problem IS NOT NULL;

-- Spans stamped by retryscope (a role, layer, ordinal, operation or route) that carry no
-- logical request id, so join no request (report `unjoined_rows`, finding `unjoined_span`):
-- their span attribute count limit evicted it (the span lost attributes), or their writer
-- wrote none. Telemetry gap records belong to no request by design.
CREATE OR REPLACE TEMP TABLE unjoined_spans AS
SELECT NULL::UBIGINT AS h, trace_id, span_id, name, span_role, start_time,
       CASE WHEN dropped_attributes > 0 THEN 'request_id_evicted'
            ELSE 'request_id_missing' END AS reason
FROM spans
WHERE logical_request_id IS NULL
  AND span_role IS DISTINCT FROM 'telemetry_gap'
  AND (span_role IS NOT NULL OR layer IS NOT NULL OR attempt_ordinal IS NOT NULL
       OR operation IS NOT NULL OR route_id IS NOT NULL);

-- The exporter's records of spans it lost (a time window and how many).
CREATE OR REPLACE TEMP TABLE telemetry_gaps AS
SELECT rs_request_key(logical_request_id) AS h,
       logical_request_id, trace_id, span_id, start_time, end_time,
       gap_dropped_spans, gap_reason
FROM spans
WHERE span_role = 'telemetry_gap';

-- Spans that arrived more than once (span_copies.sql): the model counts one copy of each.
CREATE OR REPLACE TEMP TABLE duplicate_spans AS
SELECT any_value(rs_request_key(s.logical_request_id)) AS h,
       any_value(s.logical_request_id) AS logical_request_id,
       any_value(s.trace_id) AS trace_id,
       any_value(s.span_id) AS span_id,
       any_value(s.name) AS name,
       any_value(s.span_role) AS span_role,
       min(s.start_time) AS start_time,
       any_value(c.copies) AS copies
FROM unit_spans s
JOIN span_copies c ON c.sk = hash(s.trace_id, s.span_id)
GROUP BY c.sk;

-- Ordinals are handed out in dispatch order, so a later attempt of a layer with a smaller
-- ordinal means skewed clocks or a writer that numbers attempts wrongly. Each continuation
-- numbers its own attempts (an attempt is (continuation, layer, ordinal)), so the order is
-- checked within each. Only layers with two attempts or more can show it (a third of the
-- attempts sort less).
CREATE OR REPLACE TEMP TABLE ordinal_anomalies AS
SELECT h, logical_request_id, trace_id, span_id, start_time, layer, attempt_ordinal,
       previous_ordinal
FROM (
    SELECT a.h, a.logical_request_id, a.trace_id, a.span_id, a.start_time, a.layer,
           a.attempt_ordinal,
           lag(a.attempt_ordinal) OVER (
               PARTITION BY hash(a.h, a.continuation, a.layer)
               ORDER BY a.start_time, a.attempt_ordinal, a.span_id) AS previous_ordinal
    FROM all_attempt_facts a
    SEMI JOIN (SELECT h, layer FROM all_request_layers WHERE attempts >= 2) m
      ON m.h = a.h AND m.layer = a.layer
)
WHERE previous_ordinal > attempt_ordinal;

-- Layers of a request whose recorded ordinals do not run 1, 2, ... without a gap (an
-- attempt whose span was never exported); classified HTTP sends are numbered here, not by
-- their writer, and are left out. A continuation numbers its attempts after those its
-- carrier counted, so its own run need not start at 1 but has no gap either. The
-- candidates come from all_request_layers: a layer with attempts in a continuation, or
-- whose smallest ordinal is not 1 or whose largest is not the number of distinct ordinals
-- among 1..64 (an ordinal outside 1..64 makes the smallest < 1 or the largest > 64, so it
-- is a candidate too); only their attempts are grouped again, per continuation, for the
-- exact check and the list of ordinals.
CREATE OR REPLACE TEMP TABLE ordinal_gaps AS
WITH candidates AS (
    SELECT h, layer
    FROM all_request_layers
    WHERE min_ordinal IS NOT NULL
      AND (continued OR min_ordinal <> 1 OR max_ordinal <> ordinals_1_to_64)
)
SELECT
    a.h,
    any_value(a.logical_request_id) AS logical_request_id,
    any_value(a.trace_id) AS trace_id,
    min(a.start_time) AS start_time,
    a.layer,
    list(a.attempt_ordinal ORDER BY a.attempt_ordinal) AS ordinals
FROM all_attempt_facts a
SEMI JOIN candidates c ON c.h = a.h AND c.layer = a.layer
WHERE NOT a.classified_from_http
GROUP BY a.h, a.continuation, a.layer
HAVING (a.continuation IS NULL AND min(a.attempt_ordinal) <> 1)
    OR max(a.attempt_ordinal)::BIGINT - min(a.attempt_ordinal) + 1
        <> count(DISTINCT a.attempt_ordinal);
