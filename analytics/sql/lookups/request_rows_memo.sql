-- The Requests explorer's rows of the current scope: one per in-scope logical request with
-- the figures its request_facts row holds (the model's: what the metrics count), its route
-- path (the routes of its outermost attempts, in the order first tried), its cost (wasted,
-- and after the deadline: rs_cost_after_deadline; how late it ended: rs_past_deadline_ms)
-- and its findings (finding_rows, findings.sql; $gap_ms/$min_requests/$window_ms/$budget/
-- $min_retries as in finding_list.sql). Computed once per scope and thresholds into memo_request_rows by
-- retryscope.analytics._browse; request_list.sql and request_list_count.sql page it
-- through the table macro of request_rows_matching.sql.
-- Grouped and joined on a 64-bit hash of the id alone, as the model groups a request's
-- attempts (request_facts.sql): carrying the id string through the groups costs more
-- than the rest of this statement.
CREATE OR REPLACE TEMP TABLE memo_request_rows AS
WITH firsts AS (
    SELECT hash(logical_request_id) AS h, route_id, min(start_time) AS first_start
    FROM attempt_facts
    WHERE parent_layer IS NULL AND route_id IS NOT NULL
    GROUP BY hash(logical_request_id), route_id
),
-- most requests keep to one route: only those with several aggregate an ordered path
-- (an ordered string_agg over every request costs most of this statement)
routes_per_request AS (
    SELECT h, count(*) AS n FROM firsts GROUP BY h
),
path AS (
    SELECT f.h, f.route_id AS route_path
    FROM firsts f
    SEMI JOIN routes_per_request c ON c.h = f.h AND c.n = 1
    UNION ALL
    SELECT f.h, string_agg(f.route_id, ' → ' ORDER BY f.first_start, f.route_id)
    FROM firsts f
    SEMI JOIN (SELECT h FROM routes_per_request WHERE n > 1) c ON c.h = f.h
    GROUP BY f.h
),
spend AS (
    SELECT hash(logical_request_id) AS h,
           sum(cost_micros)::BIGINT AS cost_micros,
           rs_wasted_micros(cost_micros, accepted) AS wasted_micros,
           rs_cost_after_deadline(cost_micros, end_time, request_deadline)
               AS after_deadline_micros,
           min(cost_currency) AS cost_currency
    FROM attempt_facts
    WHERE rs_has_cost(cost_actual_micros, cost_reserved_micros)
    GROUP BY hash(logical_request_id)
),
found AS (
    SELECT hash(f.logical_request_id) AS h,
           count(*)::BIGINT AS findings,
           count(*) FILTER (WHERE c.severity IS DISTINCT FROM 'info')::BIGINT AS violations,
           list(DISTINCT f.rule_id ORDER BY f.rule_id) AS rules
    FROM finding_rows($gap_ms, $min_requests, $window_ms, $budget, $min_retries, NULL) f
    LEFT JOIN finding_rules c ON c.rule_id = f.rule_id
    WHERE f.logical_request_id IS NOT NULL
    GROUP BY hash(f.logical_request_id)
),
nesting AS (
    SELECT h, retried_layers FROM request_nesting
)
SELECT
    r.h,  -- the request key (rs_request_key): what the lookups join on
    r.logical_request_id,
    r.trace_id,
    r.started_at,
    r.logical_ms AS duration_ms,
    coalesce(r.terminal, 'unknown') AS terminal,
    r.tenant,
    r.operation,
    r.entry_route,
    coalesce(p.route_path, '') AS route_path,
    r.physical_attempts AS attempts,
    r.receiver_attempts,
    r.operations,
    -- the report's figures for one request
    rs_resends(r.receiver_attempts, r.operations)::BIGINT AS excess_attempts,
    rs_amplification(r.receiver_attempts, r.operations) AS amplification_ratio,
    r.multiplication AS retry_product,
    coalesce(n.retried_layers, []) AS retried_layers,
    rs_nested(r.retried_layer_count) AS nested,
    r.has_fallback,
    r.deadline_missed,
    r.late_success,
    s.cost_micros,
    s.wasted_micros,
    s.cost_currency,
    rs_past_deadline_ms(r.ended_at, r.deadline) AS past_deadline_ms,
    s.after_deadline_micros,
    coalesce(f.findings, 0) AS findings,
    coalesce(f.violations, 0) AS violations,
    coalesce(f.rules, []) AS rules
FROM request_facts r
LEFT JOIN path p ON p.h = r.h
LEFT JOIN spend s ON s.h = r.h
LEFT JOIN found f ON f.h = r.h
LEFT JOIN nesting n ON n.h = r.h;
