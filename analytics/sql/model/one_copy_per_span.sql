-- `recorded_spans` with one copy of each span that span_copies.sql found more than once:
-- the copy that ended last (then the one whose row hashes lowest, so the choice depends on
-- the copies alone, not on the order files are read in). Created over `unit_spans`, the
-- spans being built, only when there are copies.
CREATE OR REPLACE TEMP VIEW recorded_spans AS
SELECT s.*
FROM unit_spans s
ANTI JOIN span_copies c ON c.sk = hash(s.trace_id, s.span_id)
UNION ALL
SELECT * EXCLUDE (rs_copy)
FROM (
    SELECT s.*,
           row_number() OVER (
               PARTITION BY s.trace_id, s.span_id
               ORDER BY s.end_time DESC NULLS LAST, hash(s)) AS rs_copy
    FROM unit_spans s
    SEMI JOIN span_copies c ON c.sk = hash(s.trace_id, s.span_id)
)
WHERE rs_copy = 1;
