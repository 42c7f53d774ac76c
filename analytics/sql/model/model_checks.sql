-- Telemetry and key checks of the whole data set, built with the model (and cached with
-- it): each depends on one span, on one request's own attempts or on the whole data set,
-- and filters select whole requests, so findings.sql only selects the in-scope rows of
-- these (usually empty) tables instead of scanning every span and attempt again.

-- Spans no correct writer produces: malformed ids, time running backwards (any span but a
-- telemetry gap record, also those of no logical request: a foreign writer's).
CREATE OR REPLACE TEMP TABLE span_anomalies AS
SELECT logical_request_id, trace_id, span_id, name, start_time, end_time, problem
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

-- Ordinals are handed out in dispatch order, so a later attempt of a layer with a smaller
-- ordinal means skewed clocks or a writer that numbers attempts wrongly. Only layers with
-- two attempts or more can show it (a third of the attempts sort less).
CREATE OR REPLACE TEMP TABLE ordinal_anomalies AS
SELECT logical_request_id, trace_id, span_id, start_time, layer, attempt_ordinal,
       previous_ordinal
FROM (
    SELECT a.logical_request_id, a.trace_id, a.span_id, a.start_time, a.layer,
           a.attempt_ordinal,
           lag(a.attempt_ordinal) OVER (
               PARTITION BY hash(a.logical_request_id, a.layer)
               ORDER BY a.start_time, a.attempt_ordinal) AS previous_ordinal
    FROM all_attempt_facts a
    SEMI JOIN (SELECT h, layer FROM all_request_layers WHERE attempts >= 2) m
      ON m.h = hash(a.logical_request_id) AND m.layer = a.layer
)
WHERE previous_ordinal > attempt_ordinal;

-- Layers of a request whose recorded ordinals do not run 1, 2, ... without a gap (an
-- attempt whose span was never exported); classified HTTP sends are numbered here, not by
-- their writer, and are left out. The candidates come from all_request_layers: a layer
-- whose smallest ordinal is not 1 or whose largest is not the number of distinct ordinals
-- among 1..64 (an ordinal outside 1..64 makes the smallest < 1 or the largest > 64, so it
-- is a candidate too); only their attempts are grouped again, for the exact check and the
-- list of ordinals.
CREATE OR REPLACE TEMP TABLE ordinal_gaps AS
WITH candidates AS (
    SELECT h, layer
    FROM all_request_layers
    WHERE min_ordinal IS NOT NULL
      AND (min_ordinal <> 1 OR max_ordinal <> ordinals_1_to_64)
)
SELECT
    any_value(a.logical_request_id) AS logical_request_id,
    any_value(a.trace_id) AS trace_id,
    min(a.start_time) AS start_time,
    a.layer,
    list(a.attempt_ordinal ORDER BY a.attempt_ordinal) AS ordinals
FROM all_attempt_facts a
SEMI JOIN candidates c ON c.h = hash(a.logical_request_id) AND c.layer = a.layer
WHERE NOT a.classified_from_http
GROUP BY hash(a.logical_request_id), a.layer
HAVING min(a.attempt_ordinal) <> 1
    OR max(a.attempt_ordinal) <> count(DISTINCT a.attempt_ordinal);

-- Idempotency digests shared by requests with different request digests (one key reused
-- for different work), whichever requests are in scope.
CREATE OR REPLACE TEMP TABLE idempotency_conflicts AS
SELECT idempotency_digest, count(DISTINCT logical_request_digest) AS digests
FROM request_base
WHERE idempotency_digest IS NOT NULL AND logical_request_digest IS NOT NULL
GROUP BY idempotency_digest
HAVING count(DISTINCT logical_request_digest) > 1;
