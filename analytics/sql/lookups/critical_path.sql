-- The span tree `span_tree` (request_span_tree.sql; at least span_id, parent_span_id,
-- start_time, end_time and its display order `position`) with its critical path: the chain
-- of spans that determined when the request ended. The walk starts at the tree's root (a
-- span above its roots, spanning them all, when it has several): from a span's end, its
-- child that finished last is on the path; before that child started, the child that
-- finished last by then (a child ending exactly when the next one starts is on the path:
-- sequential calls), and so on; every span on the path is walked the same way. A child is
-- clipped to its parent's time on the path (one running past its parent counts until its
-- parent ended; one wholly outside its parent is off the path); of children ending at the
-- same instant, the one that started first. `critical_ms`: the time on the path that span
-- alone accounts for (its time on the path less its children's on the path), NULL off
-- the path; `critical_total_ms`: the root's duration (the whole path's);
-- `critical_share`: `critical_ms` ÷ `critical_total_ms`.
WITH RECURSIVE n AS (
    SELECT span_id,
           CASE WHEN parent_span_id IN (SELECT span_id FROM span_tree)
                THEN parent_span_id ELSE '' END AS parent,
           start_time, end_time
    FROM span_tree
),
-- `lo`..`hi`: a span's time on the path; `parent_lo`..`parent_hi`: its parent's
walk(span_id, parent, lo, hi, parent_lo, parent_hi, depth) AS (
    SELECT '', NULL::VARCHAR, min(start_time), max(end_time), min(start_time), max(end_time), 0
    FROM n WHERE parent = ''
    UNION ALL
    SELECT span_id, parent, lo, hi, parent_lo, parent_hi, depth
    FROM (
        SELECT c.span_id, c.parent, o.lo AS parent_lo, o.hi AS parent_hi,
               greatest(c.start_time, o.lo) AS lo, least(c.end_time, o.hi) AS hi,
               o.depth + 1 AS depth, w.span_id AS came_from, o.beneath
        FROM walk w
        JOIN n c ON c.parent = w.span_id OR c.parent = w.parent
        -- beneath: the last child of `w` to finish; else the sibling that finished last
        -- before `w` started (strictly before it in end, start, id: the walk ends)
        CROSS JOIN LATERAL (
            SELECT c.parent = w.span_id AS beneath,
                   CASE WHEN c.parent = w.span_id THEN w.lo ELSE w.parent_lo END AS lo,
                   CASE WHEN c.parent = w.span_id THEN w.hi ELSE w.parent_hi END AS hi,
                   CASE WHEN c.parent = w.span_id THEN w.depth ELSE w.depth - 1 END AS depth
        ) o
        WHERE c.start_time <= o.hi AND c.end_time >= o.lo AND w.depth < 64
          AND (
              o.beneath
              OR (
                  least(c.end_time, o.hi) <= w.lo
                  AND (least(c.end_time, o.hi), greatest(c.start_time, o.lo), c.span_id)
                      < (w.hi, w.lo, w.span_id)
              )
          )
        QUALIFY row_number() OVER (
            PARTITION BY came_from, o.beneath
            ORDER BY least(c.end_time, o.hi) DESC, c.start_time, c.span_id
        ) = 1
    )
),
timed AS (
    SELECT span_id, parent, (epoch_us(hi) - epoch_us(lo)) / 1000.0 AS ms FROM walk
),
own AS (
    SELECT t.span_id, t.ms - coalesce(sum(c.ms), 0) AS critical_ms
    FROM timed t LEFT JOIN timed c ON c.parent = t.span_id
    GROUP BY t.span_id, t.ms
),
total AS (SELECT ms FROM timed WHERE span_id = '')
SELECT t.*, o.critical_ms, o.critical_ms / nullif((SELECT ms FROM total), 0) AS critical_share,
       (SELECT ms FROM total) AS critical_total_ms
FROM span_tree t
LEFT JOIN own o ON o.span_id = t.span_id AND t.span_id <> ''
ORDER BY t.position;
