-- Requests in scope with nested retries (rs_nested), largest multiplication first, with
-- each retried layer's largest retry group (e.g. 'harness 3 × transport 3'). $limit rows.
-- A caller's loop above a layer's client (caller_n) is named before that layer.
WITH layers AS (
    SELECT h, layer, 1 AS below, layer AS loop, max_n
    FROM request_layers
    WHERE h IN (SELECT h FROM request_nesting WHERE rs_nested(retried_layer_count))
    UNION ALL
    SELECT h, layer, 0, rs_caller_layer(), caller_n
    FROM request_layers
    WHERE caller_n IS NOT NULL
      AND h IN (SELECT h FROM request_nesting WHERE rs_nested(retried_layer_count))
)
SELECT
    r.logical_request_id, r.trace_id, r.started_at, r.tenant, r.operation,
    string_agg(l.loop || ' ' || l.max_n, ' × ' ORDER BY rs_layer_rank(l.layer), l.below)
        FILTER (WHERE rs_retried(l.max_n)) AS product,
    any_value(n.multiplication)::BIGINT AS multiplication
FROM layers l
JOIN request_nesting n ON n.h = l.h
JOIN requests r ON r.h = l.h
GROUP BY r.logical_request_id, r.trace_id, r.started_at, r.tenant, r.operation
ORDER BY multiplication DESC, r.started_at, r.logical_request_id
LIMIT $limit;
