-- No logical request matches: an empty `spans` of the current schema (replacing the empty
-- copy of a request_spans.sql that found nothing), so every drill-down query still runs
-- and returns no rows.
CREATE OR REPLACE TEMP TABLE spans AS SELECT * FROM _retryscope_empty;
