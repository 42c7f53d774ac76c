-- What the analyses of the in-scope logical requests read, rebuilt by
-- retryscope.analytics._filters.apply() when the filters change: `requests`,
-- `attempt_facts`, `request_nesting` and `receiver_traffic` are views onto the base tables
-- (scope_unfiltered.sql) or onto their filtered copies (scope_filtered.sql), and so are
-- `route_latency` and `request_facts` (retryscope.analytics._scope_facts); this file then
-- defines the table macros over them (a table macro binds the views it reads when it is
-- created, so these are created again with every scope).

-- Clusters of retries from different requests starting within gap_ms of one another
-- (missing jitter); clusters of at least min_requests requests.
CREATE OR REPLACE MACRO retry_clusters(gap_ms, min_requests) AS TABLE
WITH q AS (
    -- only the request key and the start time ride through the sort (a narrow sort stays
    -- in memory); the routes and the kinds are looked up for the clusters kept
    SELECT h, start_time,
           epoch_ns(start_time) AS t,
           epoch_ns(start_time) - lag(epoch_ns(start_time)) OVER w AS gap,
           lead(epoch_ns(start_time)) OVER w - epoch_ns(start_time) AS gap_after
    FROM receiver_traffic
    WHERE is_repeat
    WINDOW w AS (ORDER BY start_time)
),
-- a retry with no other within gap_ms before or after it is a cluster of its own (one
-- request): unless min_requests is 1, only the others are numbered into clusters (a
-- retry within gap_ms of the one before it has that one kept too, so the numbering is
-- the same as over all of them, at a fraction of the rows)
c AS (
    SELECT *, sum(CASE WHEN gap IS NULL OR gap > gap_ms * 1000000::BIGINT THEN 1 ELSE 0 END)
                  OVER (ORDER BY start_time ROWS UNBOUNDED PRECEDING) AS cluster
    FROM q
    WHERE min_requests <= 1
       OR gap <= gap_ms * 1000000::BIGINT
       OR gap_after <= gap_ms * 1000000::BIGINT
),
-- most clusters are one retry: keep those of min_requests requests before looking
-- anything up
kept AS (
    SELECT * FROM c
    WHERE cluster IN (
        SELECT cluster FROM c GROUP BY cluster HAVING count(DISTINCT h) >= min_requests)
),
-- the routes and kinds of the retries kept: every repeat with a kept retry's request and
-- start time is one of them (equal start times are never split between clusters)
seen AS (
    SELECT DISTINCT k.cluster, t.route_id, t.prev_kind
    FROM receiver_traffic t
    JOIN (SELECT DISTINCT h, start_time, cluster FROM kept) k
      ON k.h = t.h AND k.start_time = t.start_time
    WHERE t.is_repeat
),
shape AS (
    SELECT cluster,
           list(DISTINCT route_id ORDER BY route_id) AS routes,
           coalesce(list(DISTINCT prev_kind ORDER BY prev_kind)
                        FILTER (WHERE prev_kind IS NOT NULL), []) AS after_kinds
    FROM seen
    GROUP BY cluster
)
SELECT
    min(start_time) AS cluster_start,
    max(start_time) AS cluster_end,
    (max(k.t) - min(k.t)) / 1000000.0 AS spread_ms,
    count(*)::BIGINT AS retries,
    count(DISTINCT r.logical_request_id)::BIGINT AS logical_requests,
    any_value(s.routes) AS routes,
    any_value(s.after_kinds) AS after_kinds,
    list(DISTINCT r.logical_request_id ORDER BY r.logical_request_id) AS logical_request_ids
FROM kept k
JOIN requests r ON r.h = k.h
JOIN shape s USING (cluster)
GROUP BY cluster;

-- Receiver traffic per window of window_ms and slice of a Dimension (`value`; 'all'
-- overall): repeats as a fraction of attempts vs budget. A window is over budget when its
-- repeats exceed max(min_retries, budget x attempts): below min_retries a window holds no
-- storm whatever its fraction (Thresholds.retry_budget_min_retries, after Envoy's
-- min_retry_concurrency). Compared as a fraction, so a boundary is exact in floating point.
CREATE OR REPLACE MACRO load_windows_by(window_ms, budget, min_retries, dim) AS TABLE
SELECT
    rs_dim(dim, route_id, route_release, request_tenant, request_operation, layer, start_time)
        AS value,
    make_timestamp(
        (epoch_us(start_time) // (window_ms * 1000::BIGINT)) * (window_ms * 1000::BIGINT)
    ) AS window_start,
    count(*)::BIGINT AS attempts,
    count(*) FILTER (WHERE is_repeat)::BIGINT AS retries,
    rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) AS retry_fraction,
    count(*) FILTER (WHERE is_repeat) > min_retries
        AND rs_ratio(count(*) FILTER (WHERE is_repeat), count(*)) > budget AS over_budget,
    count(DISTINCT h)::BIGINT AS logical_requests  -- the request key: cheaper than the id
FROM receiver_traffic
GROUP BY 1, 2;
