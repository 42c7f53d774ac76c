-- The row groups of the data set's files whose statistics of column $column admit $id
-- (some value, and $id within min/max), with where their Bloom filter is (bloom_probe.py
-- checks it). A file the index of `connect` does not cover (an older file without the
-- column, a remote glob) is always a candidate: DuckDB then reads it and decides.
SELECT f.path, g.bloom_offset, g.bloom_length
FROM _retryscope_files f
LEFT JOIN _retryscope_row_groups g ON g.path = f.path AND g.column_name = $column
WHERE g.path IS NULL
    OR (
        NOT g.all_null
        AND (g.min_value IS NULL OR g.min_value <= $id)
        AND (g.max_value IS NULL OR $id <= g.max_value)
    );
