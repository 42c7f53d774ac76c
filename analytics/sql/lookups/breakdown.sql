-- A figure broken down by a dimension over time: per time bucket ($bucket_us wide, on the
-- requests' start) and per value of $dimension (memo_compare_values, compare_values_memo.sql:
-- an attempt-level value holds every request with an attempt taking it), the figures of
-- the requests behind it, each by its rule (macros.sql) over the Requests explorer's rows
-- (memo_request_rows, request_rows_memo.sql: what a link to those requests lists):
-- requests; retry amplification (rs_amplification) and excess attempts (rs_resends per
-- request); fallback rate (rs_fallback_rate, rs_fallback_requests); deadline exhaustion
-- (rs_exhausted_requests, rs_deadline_exhausted_rate); wasted cost (rs_wasted_micros per request,
-- micros of each request's currency); cost after the deadline (rs_cost_after_deadline per
-- request) and the longest time past it (rs_past_deadline_ms); violations (error and
-- warning findings).
-- The $top values of most weight for $figure (its count: requests, excess attempts,
-- requests that fell back, exhausted requests, wasted micros, micros after the deadline,
-- violations) are kept; the
-- others are one series, 'other' (a request counts once in it). Series 'all' is every
-- request in scope (the report's figures), with or without a value in $dimension.
-- Rows: series (all | value | other), value (NULL but for a value), start (NULL: the whole
-- time range), then the figures.
WITH rows AS (
    SELECT h,
           time_bucket(to_microseconds($bucket_us), started_at::TIMESTAMP) AS start,
           receiver_attempts, operations, excess_attempts, has_fallback, terminal,
           coalesce(wasted_micros, 0) AS wasted_micros,
           coalesce(after_deadline_micros, 0) AS after_deadline_micros, past_deadline_ms,
           violations
    FROM memo_request_rows
),
taken AS (
    SELECT v.h, v.value, r.* EXCLUDE (h)
    FROM memo_compare_values v
    JOIN rows r ON r.h = v.h
    WHERE v.dimension = $dimension
),
ranked AS (
    SELECT value
    FROM taken
    GROUP BY value
    ORDER BY CASE $figure
                 WHEN 'amplification' THEN sum(excess_attempts)
                 WHEN 'fallback_rate' THEN rs_fallback_requests(has_fallback)
                 WHEN 'deadline_exhausted' THEN rs_exhausted_requests(terminal)
                 WHEN 'wasted' THEN sum(wasted_micros)
                 WHEN 'after_deadline' THEN sum(after_deadline_micros)
                 WHEN 'violations' THEN sum(violations)
                 ELSE count(*)
             END DESC,
             count(*) DESC,
             value
    LIMIT $top
),
series AS (
    SELECT 'value' AS series, t.value, t.* EXCLUDE (value)
    FROM taken t
    SEMI JOIN ranked k ON k.value = t.value
    UNION ALL
    -- every request with a value outside the top ones, once
    SELECT DISTINCT ON (t.h) 'other', NULL, t.* EXCLUDE (value)
    FROM taken t
    ANTI JOIN ranked k ON k.value = t.value
    UNION ALL
    SELECT 'all', NULL, r.*
    FROM rows r
)
SELECT
    series,
    value,
    start,
    count(*)::BIGINT AS requests,
    rs_amplification(sum(receiver_attempts), sum(operations)) AS amplification,
    sum(excess_attempts)::BIGINT AS excess_attempts,
    rs_fallback_requests(has_fallback)::BIGINT AS fallback_requests,
    rs_fallback_rate(rs_fallback_requests(has_fallback), count(*)) AS fallback_rate,
    rs_exhausted_requests(terminal)::BIGINT AS deadline_exhausted,
    rs_deadline_exhausted_rate(rs_exhausted_requests(terminal), count(*)) AS deadline_exhausted_rate,
    sum(wasted_micros)::BIGINT AS wasted,
    sum(after_deadline_micros)::BIGINT AS after_deadline,
    max(past_deadline_ms) AS max_past_deadline_ms,
    sum(violations)::BIGINT AS violations
FROM series
GROUP BY GROUPING SETS ((series, value, start), (series, value))
ORDER BY start NULLS FIRST, series, value;
