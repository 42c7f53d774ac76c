-- Requests in scope where two or more layers retried, largest multiplication first, with
-- each retried layer's largest retry group (e.g. 'harness 3 × transport 3'). $limit rows.
WITH layers AS (
    SELECT h, layer, max(group_size) AS max_n
    FROM attempt_facts
    WHERE h IN (SELECT h FROM request_nesting WHERE retried_layer_count >= 2)
    GROUP BY ALL
)
SELECT
    r.logical_request_id, r.trace_id, r.started_at, r.tenant, r.operation,
    string_agg(l.layer || ' ' || l.max_n, ' × ' ORDER BY rs_layer_rank(l.layer))
        FILTER (WHERE l.max_n > 1) AS product,
    any_value(n.multiplication)::BIGINT AS multiplication
FROM layers l
JOIN request_nesting n ON n.h = l.h
JOIN requests r ON r.h = l.h
GROUP BY r.logical_request_id, r.trace_id, r.started_at, r.tenant, r.operation
ORDER BY multiplication DESC, r.started_at, r.logical_request_id
LIMIT $limit;
