-- Spans delivered more than once (a Collector's at-least-once delivery, two sources holding
-- the same spans): their key, a 64-bit hash of (trace_id, span_id), and how many copies
-- `spans` holds. Usually empty; the build then reads `spans` as it is, and otherwise
-- keeps one copy of each (retryscope.analytics.model._partition) and reports the rest
-- (duplicate_spans, model_checks.sql). Integers only: nothing else is copied per span.
CREATE OR REPLACE TEMP TABLE span_copies AS
SELECT hash(trace_id, span_id) AS sk, count(*) AS copies
FROM spans
GROUP BY 1
HAVING count(*) > 1;
