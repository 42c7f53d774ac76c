-- The rows of memo_request_rows (request_rows_memo.sql) a Requests explorer query selects
-- (NULL: any), shared by the page (request_list.sql) and its count (request_list_count.sql).
-- where_dimension/where_value: requests taking that value in that dimension
-- (memo_compare_keys under memo_compare_totals' key, compare_values_memo.sql, built when a
-- query names one; until then empty tables of their columns stand in, so the macro binds).
CREATE TEMP TABLE IF NOT EXISTS memo_compare_totals (k INTEGER, dimension VARCHAR, value VARCHAR);
CREATE TEMP TABLE IF NOT EXISTS memo_compare_keys (h UBIGINT, keys INTEGER[]);
CREATE OR REPLACE MACRO request_rows_matching(
    terminal, rule, layer, min_receiver_attempts, retried, fallback, deadline_missed, nested,
    wasted, violations, where_dimension, where_value
) AS TABLE
SELECT * FROM memo_request_rows
WHERE (terminal IS NULL OR memo_request_rows.terminal = terminal)
  AND (rule IS NULL OR list_contains(rules, rule))
  AND (layer IS NULL OR list_contains(retried_layers, layer))
  AND (min_receiver_attempts IS NULL OR receiver_attempts >= min_receiver_attempts)
  AND (retried IS NULL OR (excess_attempts > 0) = retried)
  AND (fallback IS NULL OR has_fallback = fallback)
  AND (deadline_missed IS NULL OR memo_request_rows.deadline_missed = deadline_missed)
  AND (nested IS NULL OR memo_request_rows.nested = nested)
  AND (wasted IS NULL OR (coalesce(wasted_micros, 0) > 0) = wasted)
  AND (violations IS NULL OR (memo_request_rows.violations > 0) = violations)
  AND (where_dimension IS NULL OR h IN (
      SELECT c.h FROM memo_compare_keys c
      WHERE list_contains(c.keys, (
          SELECT t.k FROM memo_compare_totals t
          WHERE t.dimension = where_dimension AND t.value = where_value
      ))
  ));
