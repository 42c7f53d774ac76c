-- Every violation and anomaly as rows (rule id, request, trace, span, time, evidence):
-- gap_ms/min_requests cluster synchronized retries, window_ms/budget judge the retry budget.
-- Created by retryscope.analytics._findings before it reads finding_list.sql (the rows) or
-- findings_counts.sql (rows per rule: DuckDB then prunes the evidence JSON). Each rule's
-- severity and meaning are in its catalog, retryscope.analytics._findings.RULES: this emits
-- only rule ids.
CREATE OR REPLACE MACRO finding_rows(gap_ms, min_requests, window_ms, budget) AS TABLE
    SELECT 'not_before_ignored' AS rule_id,
           logical_request_id, trace_id, span_id, start_time AS time,
           json_object('layer', layer, 'attempt_ordinal', attempt_ordinal, 'route_id', route_id,
                       'early_ms', (epoch_ns(not_before) - epoch_ns(start_time)) / 1000000.0,
                       'backoff_delay_ms', backoff_delay_ms,
                       'retry_after_ms', retry_after_ms) AS evidence
    FROM attempt_facts
    WHERE not_before IS NOT NULL AND start_time < not_before

    UNION ALL
    SELECT 'retry_after_non_retryable',
           logical_request_id, trace_id, span_id, start_time,
           json_object('layer', layer, 'attempt_ordinal', attempt_ordinal,
                       'route_id', route_id, 'previous_route_id', prev_route_id,
                       'previous_kind', prev_kind, 'previous_decision', prev_decision)
    FROM attempt_facts
    WHERE group_position > 1 AND prev_outcome = 'non_retryable'

    UNION ALL
    SELECT 'unreconciled_retry_after_indeterminate',
           a.logical_request_id, a.trace_id, a.span_id, a.start_time,
           json_object('layer', a.layer, 'attempt_ordinal', a.attempt_ordinal,
                       'route_id', a.route_id, 'previous_route_id', a.prev_route_id,
                       'previous_kind', a.prev_kind, 'is_fallback', a.is_fallback)
    FROM attempt_facts a
    WHERE a.group_position > 1 AND a.prev_outcome = 'indeterminate'
      AND NOT EXISTS (
          SELECT 1 FROM reconciliations c
          WHERE c.logical_request_id = a.logical_request_id AND c.result IS NOT NULL
            AND (c.at IS NULL OR (c.at >= a.prev_end AND c.at <= a.start_time))
      )

    UNION ALL
    SELECT 'idempotency_digest_conflict',
           r.logical_request_id, r.trace_id, NULL, r.started_at,
           json_object('idempotency_digest', r.idempotency_digest,
                       'logical_request_digest', r.logical_request_digest,
                       'distinct_request_digests', k.digests)
    FROM requests r
    JOIN idempotency_conflicts k  -- model_checks.sql
      ON k.idempotency_digest = r.idempotency_digest

    UNION ALL
    SELECT 'attempt_after_terminal',
           logical_request_id, trace_id, span_id, start_time,
           json_object('layer', layer, 'attempt_ordinal', attempt_ordinal,
                       'previous_decision', prev_decision,
                       'after_request_end_ms', CASE WHEN start_time > request_ended_at
                           THEN (epoch_ns(start_time) - epoch_ns(request_ended_at)) / 1000000.0
                       END)
    FROM attempt_facts
    WHERE (has_request_span AND start_time > request_ended_at)
       OR (group_position > 1 AND NOT is_hedge AND prev_decision IN ('complete', 'stop'))

    UNION ALL
    SELECT 'missing_ordinals',
           logical_request_id, trace_id, NULL, start_time,
           json_object('layer', layer, 'ordinals', ordinals)
    FROM ordinal_gaps  -- model_checks.sql
    WHERE h IN (SELECT h FROM requests)

    UNION ALL
    SELECT 'missing_terminal',
           logical_request_id, trace_id, NULL, started_at,
           json_object('has_request_span', has_request_span)
    FROM requests
    WHERE NOT has_request_span OR terminal IS NULL

    UNION ALL
    SELECT 'telemetry_gap',
           logical_request_id, trace_id, span_id, start_time,
           json_object('dropped_spans', gap_dropped_spans, 'reason', gap_reason,
                       'window_end', end_time)
    FROM telemetry_gaps  -- model_checks.sql
    WHERE (getvariable('rs_since') IS NULL OR end_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Spans that arrived more than once, counted once by the model (model_checks.sql).
    SELECT 'duplicate_span',
           logical_request_id, trace_id, span_id, start_time,
           json_object('copies', copies, 'name', name, 'span_role', span_role)
    FROM duplicate_spans
    WHERE (h IS NULL OR h IN (SELECT h FROM requests))
      AND (getvariable('rs_since') IS NULL OR start_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Spans no correct writer produces (malformed ids, time running backwards), also
    -- those of no logical request (a foreign writer's spans have none); model_checks.sql.
    SELECT 'telemetry_anomaly',
           logical_request_id, trace_id, span_id, start_time,
           json_object('problem', problem, 'name', name,
                       'duration_ms', (epoch_ns(end_time) - epoch_ns(start_time)) / 1000000.0)
    FROM span_anomalies
    WHERE (h IS NULL OR h IN (SELECT h FROM requests))
      AND (getvariable('rs_since') IS NULL OR end_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Attempts numbered below an earlier attempt of their layer (model_checks.sql).
    SELECT 'telemetry_anomaly',
           logical_request_id, trace_id, span_id, start_time,
           json_object('problem', 'ordinals_out_of_order', 'layer', layer,
                       'attempt_ordinal', attempt_ordinal, 'previous_ordinal', previous_ordinal)
    FROM ordinal_anomalies
    WHERE h IN (SELECT h FROM requests)

    UNION ALL
    SELECT 'nested_retry_owners',
           n.logical_request_id, r.trace_id, NULL, r.started_at,
           json_object('retried_layers', n.retried_layers, 'multiplication', n.multiplication,
                       'retry_owner', r.retry_owner)
    FROM request_nesting n
    JOIN requests r ON r.logical_request_id = n.logical_request_id
    WHERE n.retried_layer_count >= 2

    UNION ALL
    SELECT 'opaque_retry_ownership',
           logical_request_id, trace_id, span_id, start_time,
           json_object('layer', layer, 'retry_owner', retry_owner,
                       'lower_max_retries', lower_max_retries)
    FROM attempt_facts
    WHERE retry_owner IS NOT NULL AND coalesce(lower_max_retries, 0) > 0

    UNION ALL
    SELECT 'fallback_boundary_widening',
           logical_request_id, trace_id, span_id, start_time,
           json_object('route_id', route_id, 'route_data_boundary', route_data_boundary,
                       'allowed_boundary', allowed_boundary, 'is_fallback', is_fallback)
    FROM attempt_facts
    WHERE accepted AND NOT boundary_allowed

    UNION ALL
    SELECT 'fallback_capability_mismatch',
           logical_request_id, trace_id, span_id, start_time,
           json_object('route_id', route_id,
                       'route_capability_digest', route_capability_digest,
                       'required_capability_digest', required_capability_digest)
    FROM attempt_facts
    WHERE accepted AND is_fallback AND NOT capability_bound

    UNION ALL
    SELECT 'degraded_fallback',
           logical_request_id, trace_id, span_id, start_time,
           json_object('route_id', route_id, 'route_behavior_class', route_behavior_class,
                       'required_behavior_class', required_behavior_class)
    FROM attempt_facts
    WHERE accepted AND is_fallback AND NOT behavior_bound

    UNION ALL
    SELECT 'late_success',
           logical_request_id, trace_id, span_id, end_time,
           json_object('route_id', route_id, 'layer', layer,
                       'late_ms', (epoch_ns(end_time) - epoch_ns(request_deadline)) / 1000000.0)
    FROM attempt_facts
    WHERE outcome = 'success' AND end_time > request_deadline

    UNION ALL
    SELECT 'doomed_dispatch',
           a.logical_request_id, a.trace_id, a.span_id, a.start_time,
           json_object('route_id', a.route_id, 'layer', a.layer,
                       'deadline_remaining_ms', a.deadline_remaining_ms,
                       'route_p50_ms', l.p50_ms)
    FROM attempt_facts a
    JOIN route_latency l ON l.route_id IS NOT DISTINCT FROM a.route_id AND l.layer = a.layer
    WHERE a.deadline_remaining_ms < l.p50_ms

    UNION ALL
    SELECT 'breaker_open_dispatch',
           logical_request_id, trace_id, span_id, start_time,
           json_object('route_id', route_id, 'layer', layer, 'breaker_state', breaker_state)
    FROM attempt_facts
    WHERE breaker_state = 'open'

    UNION ALL
    SELECT 'synchronized_retries',
           s.logical_request_id, r.trace_id, NULL, s.cluster_start,
           json_object('cluster_requests', s.logical_requests, 'cluster_retries', s.retries,
                       'spread_ms', s.spread_ms, 'after_kinds', s.after_kinds)
    FROM (
        SELECT unnest(logical_request_ids) AS logical_request_id, cluster_start,
               logical_requests, retries, spread_ms, after_kinds
        FROM memo_retry_clusters  -- retry_clusters(gap_ms, min_requests), computed once
    ) s
    JOIN requests r ON r.logical_request_id = s.logical_request_id

    UNION ALL
    SELECT 'retry_budget_exceeded',
           NULL, NULL, NULL, window_start,
           json_object('attempts', attempts, 'retries', retries,
                       'retry_fraction', retry_fraction, 'budget', budget::DOUBLE)
    FROM load_windows(window_ms, budget)
    WHERE over_budget

    UNION ALL
    -- the control-plane evaluator runs per request only where policy side files exist
    SELECT 'policy_drift',
           logical_request_id, trace_id, span_id, time,
           json_object('drift', drift, 'check', "check", 'field', field,
                       'attempt_ordinal', attempt_ordinal, 'route_id', route_id,
                       'observed', observed, 'planned', planned,
                       'policy_digest', policy_digest, 'message', message)
    FROM policy_drift_rows();
