-- No logical request matches: an empty `spans` of the data set's columns, so every
-- drill-down query still runs and returns no rows.
CREATE OR REPLACE TEMP TABLE spans AS SELECT * FROM main.spans LIMIT 0;
