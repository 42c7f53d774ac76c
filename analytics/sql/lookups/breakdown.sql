-- A figure broken down by a dimension over time: per time bucket ($bucket_us wide, on the
-- requests' start) and per value of $dimension (an attempt-level value holds every request
-- with an attempt taking it), the figures of the requests behind it, each by its rule
-- (macros.sql) over the Requests explorer's rows (memo_request_rows, request_rows_memo.sql:
-- what a link to those requests lists): requests; retry amplification (rs_amplification)
-- and excess attempts (rs_resends per request); fallback rate (rs_fallback_rate,
-- rs_fallback_requests); deadline exhaustion (rs_exhausted_requests,
-- rs_deadline_exhausted_rate); wasted cost (rs_wasted_micros per request, micros of each
-- request's currency); cost after the deadline (rs_cost_after_deadline per request) and the
-- longest time past it (rs_past_deadline_ms); violations (error and warning findings).
-- The $top values of most weight for $figure (its count: requests, excess attempts,
-- requests that fell back, exhausted requests, wasted micros, micros after the deadline,
-- violations) are kept; the others are one series, 'other' (a request counts once in it).
-- Series 'all' is every request in scope (the report's figures), with or without a value
-- in $dimension.
-- Rows: series (all | value | other), value (NULL but for a value), start (NULL: the whole
-- time range), then the figures.
-- Read from memo_compare_keys (compare_values_memo.sql: per request, its figures and the
-- integer keys k of its values; $dimension's keys are consecutive in memo_compare_totals):
-- the requests are first counted and summed per time bucket and set of $dimension's values
-- they take, a few thousand groups, which every series then adds up.
WITH dim AS (
    SELECT k, value FROM memo_compare_totals WHERE dimension = $dimension
),
groups AS (
    SELECT time_bucket(to_microseconds($bucket_us), r.started_at::TIMESTAMP) AS start,
           list_filter(r.keys, lambda x: x BETWEEN b.lo AND b.hi) AS ks,
           count(*) AS requests,
           sum(r.receiver_attempts) AS receiver_attempts,
           sum(r.operations) AS operations,
           sum(r.excess_attempts) AS excess_attempts,
           rs_fallback_requests(r.has_fallback) AS fallback_requests,
           rs_exhausted_requests(r.terminal) AS deadline_exhausted,
           sum(coalesce(r.wasted_micros, 0)) AS wasted,
           sum(coalesce(r.after_deadline_micros, 0)) AS after_deadline,
           max(r.past_deadline_ms) AS max_past_deadline_ms,
           sum(r.violations) AS violations
    FROM memo_compare_keys r, (SELECT min(k) AS lo, max(k) AS hi FROM dim) b
    GROUP BY ALL
),
-- a group once per value its requests take
taken AS (
    SELECT unnest(ks) AS k, * EXCLUDE (ks) FROM groups
),
ranked AS (
    SELECT t.k
    FROM taken t
    JOIN dim d ON d.k = t.k
    GROUP BY t.k, d.value
    ORDER BY CASE $figure
                 WHEN 'amplification' THEN sum(excess_attempts)
                 WHEN 'fallback_rate' THEN sum(fallback_requests)
                 WHEN 'deadline_exhausted' THEN sum(deadline_exhausted)
                 WHEN 'wasted' THEN sum(wasted)
                 WHEN 'after_deadline' THEN sum(after_deadline)
                 WHEN 'violations' THEN sum(violations)
                 ELSE sum(requests)
             END DESC,
             sum(requests) DESC,
             d.value
    LIMIT $top
),
-- series: 0 all, -1 other, else the value's key
series AS (
    SELECT 0 AS series, * EXCLUDE (ks) FROM groups
    UNION ALL
    -- every request with a value outside the top ones, once
    SELECT -1, g.* EXCLUDE (ks)
    FROM groups g, (SELECT list(k) AS top FROM ranked) t
    WHERE NOT list_has_all(t.top, g.ks)
    UNION ALL
    SELECT t.*
    FROM taken t
    SEMI JOIN ranked k ON k.k = t.k
),
figures AS (
    SELECT
        series,
        start,
        sum(requests)::BIGINT AS requests,
        rs_amplification(sum(receiver_attempts), sum(operations)) AS amplification,
        sum(excess_attempts)::BIGINT AS excess_attempts,
        sum(fallback_requests)::BIGINT AS fallback_requests,
        rs_fallback_rate(sum(fallback_requests), sum(requests)) AS fallback_rate,
        sum(deadline_exhausted)::BIGINT AS deadline_exhausted,
        rs_deadline_exhausted_rate(sum(deadline_exhausted), sum(requests))
            AS deadline_exhausted_rate,
        sum(wasted)::BIGINT AS wasted,
        sum(after_deadline)::BIGINT AS after_deadline,
        max(max_past_deadline_ms) AS max_past_deadline_ms,
        sum(violations)::BIGINT AS violations
    FROM series
    GROUP BY GROUPING SETS ((series, start), (series))
)
SELECT CASE f.series WHEN 0 THEN 'all' WHEN -1 THEN 'other' ELSE 'value' END AS series,
       d.value,
       f.* EXCLUDE (series)
FROM figures f
LEFT JOIN dim d ON d.k = f.series
ORDER BY start NULLS FIRST, series, value;
