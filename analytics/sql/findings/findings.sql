-- Every violation and anomaly as rows (rule id, request, trace, span, time, evidence):
-- gap_ms/min_requests cluster synchronized retries, window_ms/budget/min_retries judge the
-- retry budget;
-- `only_request` (a logical request id, or NULL for all) keeps one request's rows,
-- selected before any window so a drill-down does not evaluate the whole scope.
-- Created by retryscope.analytics._findings before it reads finding_list.sql (the rows) or
-- findings_counts.sql (rows per rule: DuckDB then prunes the evidence JSON). Each rule's
-- severity and meaning are in its catalog, retryscope.analytics._findings.RULES: this emits
-- only rule ids.
CREATE OR REPLACE MACRO finding_rows(gap_ms, min_requests, window_ms, budget, min_retries, only_request) AS TABLE
    -- the findings of single attempts, judged when the model was built (model_findings.sql)
    SELECT f.rule_id, f.logical_request_id, f.trace_id, f.span_id, f.time, f.evidence
    FROM attempt_findings f
    JOIN requests r ON r.h = f.h  -- joined, not semi-joined: as missing_ordinals below
    WHERE only_request IS NULL OR f.logical_request_id = only_request

    UNION ALL
    SELECT 'idempotency_digest_conflict',
           r.logical_request_id, r.trace_id, NULL, r.started_at,
           json_object('idempotency_digest', r.idempotency_digest,
                       'logical_request_digest', r.logical_request_digest,
                       'distinct_request_digests', k.digests)
    FROM requests r
    JOIN idempotency_conflicts k  -- model_checks.sql
      ON k.idempotency_digest = r.idempotency_digest
    WHERE only_request IS NULL OR r.logical_request_id = only_request

    UNION ALL
    -- joined to the requests in scope (one row per request key) rather than semi-joined
    -- to them: DuckDB then builds its hash table on the few rows of the check, not on
    -- every request's key
    SELECT 'missing_ordinals',
           g.logical_request_id, g.trace_id, NULL, g.start_time,
           json_object('layer', g.layer, 'ordinals', g.ordinals)
    FROM ordinal_gaps g  -- model_checks.sql
    JOIN requests r ON r.h = g.h
    WHERE only_request IS NULL OR g.logical_request_id = only_request

    UNION ALL
    SELECT 'missing_terminal',
           logical_request_id, trace_id, NULL, started_at,
           json_object('has_request_span', has_request_span)
    FROM requests
    WHERE (NOT has_request_span OR terminal IS NULL)
      AND (only_request IS NULL OR logical_request_id = only_request)

    UNION ALL
    SELECT 'telemetry_gap',
           logical_request_id, trace_id, span_id, start_time,
           json_object('dropped_spans', gap_dropped_spans, 'reason', gap_reason,
                       'window_end', end_time)
    FROM telemetry_gaps  -- model_checks.sql
    WHERE (only_request IS NULL OR logical_request_id = only_request)
      AND (getvariable('rs_since') IS NULL OR end_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Spans that arrived more than once, counted once by the model (model_checks.sql).
    SELECT 'duplicate_span',
           logical_request_id, trace_id, span_id, start_time,
           json_object('copies', copies, 'name', name, 'span_role', span_role)
    FROM (  -- of no request, or of one in scope (joined: as missing_ordinals above)
        SELECT * FROM duplicate_spans WHERE h IS NULL
        UNION ALL
        SELECT d.* FROM duplicate_spans d JOIN requests r ON r.h = d.h
    )
    WHERE (only_request IS NULL OR logical_request_id = only_request)
      AND (getvariable('rs_since') IS NULL OR start_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Spans stamped by retryscope that join no request: no logical request id
    -- (model_checks.sql; report `unjoined_rows`).
    SELECT 'unjoined_span', NULL, trace_id, span_id, start_time,
           json_object('reason', reason, 'name', name, 'span_role', span_role)
    FROM unjoined_spans
    WHERE only_request IS NULL
      AND (getvariable('rs_since') IS NULL OR start_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Spans no correct writer produces (malformed ids, time running backwards), also
    -- those of no logical request (a foreign writer's spans have none); model_checks.sql.
    SELECT 'telemetry_anomaly',
           logical_request_id, trace_id, span_id, start_time,
           json_object('problem', problem, 'name', name,
                       'duration_ms', (epoch_ns(end_time) - epoch_ns(start_time)) / 1000000.0)
    FROM (  -- as duplicate_span above
        SELECT * FROM span_anomalies WHERE h IS NULL
        UNION ALL
        SELECT a.* FROM span_anomalies a JOIN requests r ON r.h = a.h
    )
    WHERE (only_request IS NULL OR logical_request_id = only_request)
      AND (getvariable('rs_since') IS NULL OR end_time >= getvariable('rs_since'))
      AND (getvariable('rs_until') IS NULL OR start_time < getvariable('rs_until'))

    UNION ALL
    -- Attempts numbered below an earlier attempt of their layer (model_checks.sql).
    SELECT 'telemetry_anomaly',
           o.logical_request_id, o.trace_id, o.span_id, o.start_time,
           json_object('problem', 'ordinals_out_of_order', 'layer', o.layer,
                       'attempt_ordinal', o.attempt_ordinal, 'previous_ordinal', o.previous_ordinal)
    FROM ordinal_anomalies o
    JOIN requests r ON r.h = o.h  -- joined, not semi-joined: as missing_ordinals above
    WHERE only_request IS NULL OR o.logical_request_id = only_request

    UNION ALL
    SELECT 'nested_retry_owners',
           r.logical_request_id, r.trace_id, NULL, r.started_at,
           json_object('retried_layers', n.retried_layers, 'multiplication', n.multiplication,
                       'retry_owner', r.retry_owner)
    FROM request_nesting n
    JOIN requests r ON r.h = n.h
    WHERE rs_nested(n.retried_layer_count) AND (only_request IS NULL OR r.logical_request_id = only_request)

    -- The request-level rules below fire once per request, when its request_facts row
    -- says so (the definitions the fallback and deadline metrics count), on the
    -- outermost attempt that shows it: a harness attempt and the transport send beneath
    -- it are one answer, not two.
    UNION ALL
    SELECT 'fallback_boundary_widening',
           a.logical_request_id, a.trace_id, a.span_id, a.start_time,
           json_object('route_id', a.route_id, 'route_data_boundary', a.route_data_boundary,
                       'allowed_boundary', a.allowed_boundary, 'is_fallback', a.is_fallback)
    FROM request_facts r
    JOIN attempt_facts a ON a.h = r.h
    WHERE r.boundary_widened AND a.accepted AND NOT a.boundary_allowed
      AND (only_request IS NULL OR r.logical_request_id = only_request)
    QUALIFY row_number() OVER (
        PARTITION BY a.h ORDER BY rs_layer_rank(a.layer), a.start_time
    ) = 1

    UNION ALL
    -- incompatible: the answering fallback breaks the capability; degraded: the
    -- capability and the data boundary hold, the behavior class differs (fallback.sql's
    -- degraded_fallbacks). Both read the request's answering fallback attempt.
    SELECT CASE WHEN NOT fallback_capability_bound THEN 'fallback_capability_mismatch'
                ELSE 'degraded_fallback' END,
           logical_request_id, trace_id, span_id, start_time,
           CASE WHEN NOT fallback_capability_bound
                THEN json_object('route_id', route_id,
                                 'route_capability_digest', route_capability_digest,
                                 'required_capability_digest', required_capability_digest)
                ELSE json_object('route_id', route_id,
                                 'route_behavior_class', route_behavior_class,
                                 'required_behavior_class', required_behavior_class)
           END
    FROM (
        -- each answered request's outermost accepted attempt on its fallback route
        SELECT a.*, r.fallback_capability_bound
        FROM request_facts r
        JOIN attempt_facts a
          ON a.h = r.h
         AND a.route_id IS NOT DISTINCT FROM r.fallback_route
        WHERE r.fallback_success
          AND (NOT r.fallback_capability_bound
               OR rs_fallback_degraded(r.fallback_capability_bound, r.fallback_behavior_bound,
                                       r.fallback_boundary_allowed))  -- unknown: neither
          AND rs_fallback_answer(a.accepted, a.is_fallback)
          AND (only_request IS NULL OR r.logical_request_id = only_request)
        QUALIFY row_number() OVER (
            PARTITION BY a.h
            ORDER BY rs_layer_rank(a.layer), a.start_time
        ) = 1
    )

    UNION ALL
    SELECT 'late_success',
           a.logical_request_id, a.trace_id, a.span_id, a.end_time,
           json_object('route_id', a.route_id, 'layer', a.layer,
                       'late_ms',
                       (epoch_ns(a.end_time) - epoch_ns(a.request_deadline)) / 1000000.0)
    FROM request_facts r
    JOIN attempt_facts a ON a.h = r.h
    WHERE getvariable('rs_scope_late_success')  -- set below
      AND r.late_success AND rs_late_success(a.outcome, a.end_time, a.request_deadline)
      AND (only_request IS NULL OR r.logical_request_id = only_request)
    QUALIFY row_number() OVER (
        PARTITION BY a.h ORDER BY rs_layer_rank(a.layer), a.end_time
    ) = 1

    UNION ALL
    SELECT 'deadline_exhausted',
           logical_request_id, trace_id, NULL, started_at,
           json_object('deadline_ms', rs_ms(deadline) - rs_ms(started_at),
                       'duration_ms', logical_ms,
                       'attempts', physical_attempts,
                       'receiver_attempts', receiver_attempts)
    FROM request_facts
    WHERE rs_deadline_exhausted(terminal) AND (only_request IS NULL OR logical_request_id = only_request)

    UNION ALL
    SELECT 'doomed_dispatch',
           a.logical_request_id, a.trace_id, a.span_id, a.start_time,
           json_object('route_id', a.route_id, 'layer', a.layer,
                       'deadline_remaining_ms', a.deadline_remaining_ms,
                       'route_p50_ms', a.p50_ms)
    FROM doomed_attempts a
    WHERE only_request IS NULL OR a.logical_request_id = only_request

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
    JOIN requests r ON r.h = rs_request_key(s.logical_request_id)
    WHERE only_request IS NULL OR s.logical_request_id = only_request

    UNION ALL
    SELECT 'retry_budget_exceeded',
           NULL, NULL, NULL, window_start,
           json_object('attempts', attempts, 'retries', retries,
                       'retry_fraction', retry_fraction, 'budget', budget::DOUBLE,
                       'min_retries', min_retries::BIGINT)
    -- load_windows_by(window_ms, budget, min_retries, 'overall'), computed once
    FROM memo_load_windows
    WHERE over_budget AND only_request IS NULL  -- a window, not a request's

    UNION ALL
    -- the control-plane evaluator runs per request only where policy side files exist
    SELECT 'policy_drift',
           logical_request_id, trace_id, span_id, time,
           json_object('drift', drift, 'check', "check", 'field', field,
                       'attempt_ordinal', attempt_ordinal, 'route_id', route_id,
                       'observed', observed, 'planned', planned,
                       'policy_digest', policy_digest, 'message', message)
    FROM policy_drift_rows()
    WHERE only_request IS NULL OR logical_request_id = only_request;

-- Whether any request in scope succeeded late, for late_success above: a constant when the
-- query is bound, so with none DuckDB drops that branch instead of reading every
-- successful attempt. Set with the macro, which is created again before each use.
SET VARIABLE rs_scope_late_success = (SELECT count(*) > 0 FROM request_facts WHERE late_success);
