-- The value each in-scope logical request takes in every dimension a comparison ranks
-- (compare.sql): one row per request, dimension and value, computed once per scope into
-- memo_compare_values by retryscope.analytics._compare (and per request as keys below). Request-level dimensions hold one
-- value per request; attempt-level ones every distinct value among its attempts (a request
-- is "in" each), so every value names a set of requests and shares compare across values.
--   route, release, layer, outcome_kind, http_status, attempt_ordinal (layer #ordinal):
--     its attempts'; fallback_trigger: the outcome kind of the attempt a fallback
--     attempt followed on another route (why the fallback fired); route_hop: that hop,
--     "from → to after <outcome kind>";
--   tenant, operation, terminal, retry_owner, entry_route: the request's own;
--   deadline_left: the least deadline left at any of its dispatches, bucketed.
CREATE OR REPLACE TEMP TABLE memo_compare_values AS
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
-- the whole less its slice, so a slice aggregates only its own requests' values).
CREATE OR REPLACE TEMP TABLE memo_compare_totals AS
SELECT (row_number() OVER (ORDER BY dimension, value))::INTEGER AS k, dimension, value,
       count(*) AS requests
FROM memo_compare_values
GROUP BY dimension, value;

-- The same values as one row per request, a list of their keys k: a slice's comparison
-- reads only its own requests' rows and counts narrow integers, not the scope's strings.
CREATE OR REPLACE TEMP TABLE memo_compare_keys AS
SELECT v.h, list(t.k) AS keys
FROM memo_compare_values v
JOIN memo_compare_totals t ON t.dimension = v.dimension AND t.value = v.value
GROUP BY v.h;
