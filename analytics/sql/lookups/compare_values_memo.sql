-- The value each in-scope logical request takes in every dimension a comparison ranks
-- (compare.sql) and a breakdown groups by (breakdown.sql), computed once per scope (and
-- per memo_request_rows: a breakdown reads its figures here) by retryscope.analytics._browse
-- into two tables: memo_compare_totals, each value under an integer key k with how many
-- requests take it, and memo_compare_keys, one row per request with the keys of its values.
-- Request-level dimensions hold one value per request; attempt-level ones every distinct
-- value among its attempts (a request is "in" each), so every value names a set of
-- requests and shares compare across values.
--   route, release, layer, outcome_kind, http_status, attempt_ordinal (layer #ordinal):
--     its attempts'; fallback_trigger: the outcome kind of the attempt a fallback
--     attempt followed on another route (why the fallback fired); route_hop: that hop,
--     "from → to after <outcome kind>";
--   tenant, operation, terminal, retry_owner, entry_route: the request's own;
--   deadline_left: the least deadline left at any of its dispatches, bucketed.
-- One row per request, dimension and value (≈ 15 per request) only while the two are built.
CREATE OR REPLACE TEMP TABLE compare_value_rows AS
WITH own AS (
    SELECT h, tenant, operation, coalesce(terminal, 'unknown') AS terminal,
           retry_owner, entry_route
    FROM request_facts
),
attempts AS (
    SELECT DISTINCT h, dimension, value
    FROM (
        SELECT
            h,
            route_id AS route,
            route_release AS release,
            layer,
            coalesce(outcome_kind, outcome, 'unknown') AS outcome_kind,
            CAST(http_status_code AS VARCHAR) AS http_status,
            layer || ' #' || attempt_ordinal AS attempt_ordinal,
            CASE WHEN is_fallback AND prev_route_id IS DISTINCT FROM route_id
                 THEN coalesce(prev_kind, prev_outcome, 'no attempt before') END
                AS fallback_trigger,
            CASE WHEN is_fallback AND prev_route_id IS DISTINCT FROM route_id
                 THEN coalesce(prev_route_id, '(no route)') || ' → ' || coalesce(route_id, '?')
                      || ' after ' || coalesce(prev_kind, prev_outcome, 'no attempt before') END
                AS route_hop
        FROM attempt_facts
    ) UNPIVOT (value FOR dimension IN (
        route, release, layer, outcome_kind, http_status, attempt_ordinal, fallback_trigger,
        route_hop
    ))
),
deadline_left AS (
    SELECT h,
           CASE WHEN least_left IS NULL THEN 'no deadline'
                WHEN least_left <= 0 THEN 'none left'
                WHEN least_left < 100 THEN '< 100 ms'
                WHEN least_left < 1000 THEN '100 ms – 1 s'
                WHEN least_left < 10000 THEN '1 – 10 s'
                ELSE '≥ 10 s' END AS value
    FROM (SELECT h, min(deadline_remaining_ms) AS least_left FROM attempt_facts GROUP BY h)
)
SELECT h, dimension, value
FROM own UNPIVOT (value FOR dimension IN (tenant, operation, terminal, retry_owner, entry_route))
UNION ALL
SELECT h, dimension, value FROM attempts
UNION ALL
SELECT h, 'deadline_left', value FROM deadline_left;

-- How many requests take each value, under a key k: a comparison's whole (its baseline is
-- the whole less its slice, so a slice aggregates only its own requests' values). The keys
-- of a dimension are consecutive (k follows dimension, then value).
CREATE OR REPLACE TEMP TABLE memo_compare_totals AS
SELECT (row_number() OVER (ORDER BY dimension, value))::INTEGER AS k, dimension, value,
       count(*) AS requests
FROM compare_value_rows
GROUP BY dimension, value;

-- The same values as one row per request, a list of their keys k: a slice's comparison
-- reads only its own requests' rows and counts narrow integers, not the scope's strings.
-- Beside them the request's figures a breakdown sums (memo_request_rows', copied), so a
-- breakdown reads this one table.
CREATE OR REPLACE TEMP TABLE memo_compare_keys AS
SELECT r.h, coalesce(v.keys, []) AS keys,
       r.started_at, r.receiver_attempts, r.operations, r.excess_attempts, r.has_fallback,
       r.terminal, r.wasted_micros, r.after_deadline_micros, r.past_deadline_ms, r.violations
FROM memo_request_rows r
LEFT JOIN (
    SELECT v.h, list(t.k) AS keys
    FROM compare_value_rows v
    JOIN memo_compare_totals t ON t.dimension = v.dimension AND t.value = v.value
    GROUP BY v.h
) v ON v.h = r.h;

DROP TABLE compare_value_rows;
