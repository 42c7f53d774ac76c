-- Every span of the logical requests $ids (the request span, its attempts and whatever ran
-- beneath them: third-party instrumentations' spans too) and their traces' spans of no
-- request, as a tree in display order (`position`): `depth` below the request's root,
-- `path` the start-ordered ancestry, `children` the number of spans directly beneath. A
-- span whose parent is not among them is a root; a span no root reaches (a parent cycle in
-- foreign data) is listed as a root too. Reads the cursor-local `spans` of one drill-down
-- (retryscope.analytics._requests) into `span_tree`, which critical_path.sql completes.
CREATE OR REPLACE TEMP TABLE span_tree AS
WITH RECURSIVE traces AS (
    SELECT trace_id FROM spans WHERE list_contains($ids, logical_request_id)
    UNION
    SELECT rs_implicit_trace(unnest($ids))
),
s AS (
    SELECT *,
           strftime(start_time, '%Y%m%d%H%M%S.%f') || span_id AS sort_key,
           coalesce(cost_actual_micros, cost_reserved_micros) AS cost_micros
    FROM spans
    WHERE (
        list_contains($ids, logical_request_id)
        OR (logical_request_id IS NULL AND trace_id IN (SELECT trace_id FROM traces))
    ) AND span_role IS DISTINCT FROM 'telemetry_gap'
),
roots AS (
    SELECT span_id FROM s
    WHERE parent_span_id IS NULL OR parent_span_id NOT IN (SELECT span_id FROM s)
),
tree(span_id, depth, path) AS (
    SELECT DISTINCT s.span_id, 0, [s.sort_key]
    FROM s SEMI JOIN roots USING (span_id)
    UNION ALL
    SELECT DISTINCT c.span_id, t.depth + 1, list_append(t.path, c.sort_key)
    FROM tree t
    JOIN s c ON c.parent_span_id = t.span_id
    WHERE t.depth < 64
),
placed AS (
    SELECT span_id, min(depth) AS depth, min(path) AS path FROM tree GROUP BY span_id
),
children AS (
    SELECT parent_span_id AS span_id, count(*)::BIGINT AS children
    FROM s WHERE parent_span_id IS NOT NULL GROUP BY parent_span_id
)
SELECT
    row_number() OVER (ORDER BY coalesce(p.path, [s.sort_key]), s.sort_key) AS position,
    s.span_id, s.parent_span_id, s.trace_id, s.logical_request_id,
    coalesce(p.depth, 0) AS depth,
    coalesce(c.children, 0) AS children,
    s.name, s.kind, s.span_role, s.service_name, s.scope_name,
    s.start_time, s.end_time, s.duration_ms,
    s.status_code, s.status_message, s.error_type,
    s.layer, s.attempt_ordinal, s.parent_layer, s.parent_attempt_ordinal,
    s.route_id, s.route_release, s.is_fallback, s.route_data_boundary, s.route_behavior_class,
    s.http_method, s.http_status_code, s.http_resend_count,
    s.outcome, s.outcome_kind, s.decision, s.terminal,
    s.backoff_delay_ms, s.retry_after_ms, s.not_before, s.deadline, s.deadline_remaining_ms,
    s.cost_micros, s.cost_currency, coalesce(s.cost_estimated, FALSE) AS cost_estimated,
    s.hedge_ordinal, s.breaker_state,
    s.gen_ai_provider_name, s.gen_ai_request_model, s.gen_ai_response_model,
    s.gen_ai_operation_name, s.gen_ai_input_tokens, s.gen_ai_output_tokens,
    s.events
FROM s
LEFT JOIN placed p ON p.span_id = s.span_id
LEFT JOIN children c ON c.span_id = s.span_id
ORDER BY coalesce(p.path, [s.sort_key]), s.sort_key;
