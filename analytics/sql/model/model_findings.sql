-- The findings of single attempts, each judged from the attempt and its own request alone
-- (its place in its retry group, the request's end and reconciliations): built with the
-- model's per-request tables (after model_requests.sql), so finding_rows (findings.sql)
-- selects the in-scope rows of this (usually empty) table instead of scanning every
-- attempt once per rule. Columns as finding_rows emits them, with the request key h.
-- Each rule's severity and meaning are in its catalog, retryscope.analytics._findings.RULES.
CREATE OR REPLACE TEMP TABLE attempt_findings AS
SELECT h, 'not_before_ignored' AS rule_id,
       logical_request_id, trace_id, span_id, start_time AS time,
       json_object('layer', layer, 'attempt_ordinal', attempt_ordinal, 'route_id', route_id,
                   'early_ms', (epoch_ns(not_before) - epoch_ns(start_time)) / 1000000.0,
                   'backoff_delay_ms', backoff_delay_ms,
                   'retry_after_ms', retry_after_ms) AS evidence
FROM all_attempt_facts
WHERE not_before IS NOT NULL AND start_time < not_before

UNION ALL
SELECT h, 'retry_after_non_retryable',
       logical_request_id, trace_id, span_id, start_time,
       json_object('layer', layer, 'attempt_ordinal', attempt_ordinal,
                   'route_id', route_id, 'previous_route_id', prev_route_id,
                   'previous_kind', prev_kind, 'previous_decision', prev_decision)
FROM all_attempt_facts
WHERE group_position > 1 AND prev_outcome = 'non_retryable'

UNION ALL
SELECT a.h, 'unreconciled_retry_after_indeterminate',
       a.logical_request_id, a.trace_id, a.span_id, a.start_time,
       json_object('layer', a.layer, 'attempt_ordinal', a.attempt_ordinal,
                   'route_id', a.route_id, 'previous_route_id', a.prev_route_id,
                   'previous_kind', a.prev_kind, 'is_fallback', a.is_fallback)
FROM all_attempt_facts a
WHERE a.group_position > 1 AND a.prev_outcome = 'indeterminate'
  AND NOT EXISTS (
      SELECT 1 FROM reconciliations c
      WHERE c.logical_request_id = a.logical_request_id AND c.result IS NOT NULL
        AND (c.at IS NULL OR (c.at >= a.prev_end AND c.at <= a.start_time))
  )

UNION ALL
SELECT h, 'attempt_after_terminal',
       logical_request_id, trace_id, span_id, start_time,
       json_object('layer', layer, 'attempt_ordinal', attempt_ordinal,
                   'previous_decision', prev_decision,
                   'after_request_end_ms', CASE WHEN start_time > request_ended_at
                       THEN (epoch_ns(start_time) - epoch_ns(request_ended_at)) / 1000000.0
                   END)
FROM all_attempt_facts
WHERE ((has_request_span AND start_time > request_ended_at)
       OR (group_position > 1 AND NOT is_hedge AND prev_decision IN ('complete', 'stop')))

UNION ALL
SELECT h, 'opaque_retry_ownership',
       logical_request_id, trace_id, span_id, start_time,
       json_object('layer', layer, 'retry_owner', retry_owner,
                   'lower_max_retries', lower_max_retries)
FROM all_attempt_facts
WHERE rs_opaque_ownership(retry_owner, lower_max_retries)

UNION ALL
SELECT h, 'breaker_open_dispatch',
       logical_request_id, trace_id, span_id, start_time,
       json_object('route_id', route_id, 'layer', layer, 'breaker_state', breaker_state)
FROM all_attempt_facts
WHERE breaker_state = 'open';
