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
-- ordinal means skewed clocks or a writer that numbers attempts wrongly.
CREATE OR REPLACE TEMP TABLE ordinal_anomalies AS
SELECT logical_request_id, trace_id, span_id, start_time, layer, attempt_ordinal,
       previous_ordinal
FROM (
    SELECT logical_request_id, trace_id, span_id, start_time, layer, attempt_ordinal,
           lag(attempt_ordinal) OVER (
               PARTITION BY hash(logical_request_id, layer)
               ORDER BY start_time, attempt_ordinal) AS previous_ordinal
    FROM all_attempt_facts
)
WHERE previous_ordinal > attempt_ordinal;

-- Layers of a request whose recorded ordinals do not run 1, 2, ... without a gap (an
-- attempt whose span was never exported); classified HTTP sends are numbered here, not by
-- their writer, and are left out.
CREATE OR REPLACE TEMP TABLE ordinal_gaps AS
SELECT
    any_value(logical_request_id) AS logical_request_id,
    any_value(trace_id) AS trace_id,
    min(start_time) AS start_time,
    layer,
    list(attempt_ordinal ORDER BY attempt_ordinal) AS ordinals
FROM all_attempt_facts
WHERE NOT classified_from_http
-- grouped on a 64-bit hash of the request id: far cheaper than on the id string
GROUP BY hash(logical_request_id), layer
HAVING min(attempt_ordinal) <> 1 OR max(attempt_ordinal) <> count(DISTINCT attempt_ordinal);

-- Idempotency digests shared by requests with different request digests (one key reused
-- for different work), whichever requests are in scope.
CREATE OR REPLACE TEMP TABLE idempotency_conflicts AS
SELECT idempotency_digest, count(DISTINCT logical_request_digest) AS digests
FROM request_base
WHERE idempotency_digest IS NOT NULL AND logical_request_digest IS NOT NULL
GROUP BY idempotency_digest
HAVING count(DISTINCT logical_request_digest) > 1;
