-- known_policies(): every policy document of the data set, by digest — from the request
-- spans the control plane wrote and from the side files.
-- Policy drift: each logical request whose policy document is known — carried by a request
-- span of the policy (`policy_document`, written by the control plane) or a side file of
-- the data set (table `policy_documents`, loaded by connect()) — is re-evaluated by the
-- control-plane evaluator (Python UDF rs_policy_drift, one call per request) on its retry
-- owner's attempts, grouped here in attempt order, with what the request bound at
-- admission (its digests and deadline) and the shared guards' verdicts (its
-- `retryscope.routing` events). Requests in scope of the current filters only, at most
-- getvariable('rs_drift_cap') of them (a deterministic sample by hash of the logical
-- request id when there are more).
CREATE OR REPLACE MACRO known_policies() AS TABLE
SELECT policy_digest, any_value(document) AS document
FROM (
    SELECT policy_digest, document FROM policy_documents
    UNION ALL
    SELECT policy_digest, policy_document
    FROM spans
    WHERE span_role = 'logical_request' AND policy_document IS NOT NULL
)
GROUP BY policy_digest;

CREATE OR REPLACE MACRO policy_drift_rows() AS TABLE
WITH documents AS (SELECT * FROM known_policies()),
req AS (
    SELECT s.logical_request_id,
           any_value(s.trace_id) AS trace_id,
           any_value(s.span_id) AS span_id,
           any_value(s.policy_digest) AS policy_digest,
           any_value(s.terminal) AS terminal,
           any_value(s.logical_request_digest) AS logical_request_digest,
           any_value(s.idempotency_digest) AS idempotency_digest,
           any_value(epoch_ns(s.deadline)) AS deadline_ns,
           max(epoch_ns(s.end_time)) AS ended_ns
    FROM spans s
    -- requests whose policy is known first: most data sets have no documents at all
    WHERE s.span_role = 'logical_request'
      AND s.policy_digest IN (SELECT policy_digest FROM documents)
    GROUP BY s.logical_request_id
),
sampled AS (
    SELECT r.*, d.document
    FROM req r JOIN documents d ON d.policy_digest = r.policy_digest
    WHERE r.logical_request_id IN (SELECT logical_request_id FROM requests)
    ORDER BY hash(r.logical_request_id), r.logical_request_id
    LIMIT coalesce(getvariable('rs_drift_cap'), 10000)
),
owner_layer AS (
    -- the retry owner's attempts: the outermost marked layer of the request
    SELECT logical_request_id, arg_min(layer, rs_layer_rank(layer)) AS layer
    FROM spans
    WHERE span_role = 'attempt' AND logical_request_id IN (SELECT logical_request_id FROM sampled)
    GROUP BY logical_request_id
),
attempts AS (
    SELECT a.logical_request_id,
           to_json(list({
               'route_id': a.route_id, 'route_release': a.route_release,
               'route_attempt_ordinal': a.route_attempt_ordinal,
               'attempt_ordinal': a.attempt_ordinal,
               'logical_request_digest': coalesce(a.logical_request_digest, q.logical_request_digest),
               'idempotency_digest': coalesce(a.idempotency_digest, q.idempotency_digest),
               'start_time': epoch_ns(a.start_time), 'end_time': epoch_ns(a.end_time),
               'outcome': a.outcome, 'outcome_kind': a.outcome_kind,
               'not_before': epoch_ns(a.not_before), 'backoff_delay_ms': a.backoff_delay_ms,
               'retry_after_ms': a.retry_after_ms,
               'cost_reserved_micros': a.cost_reserved_micros,
               'cost_actual_micros': a.cost_actual_micros,
               'hedge_ordinal': a.hedge_ordinal, 'hedge_result': a.hedge_result,
               'cancelled': coalesce(a.attributes['retryscope.attempt.cancelled'] = 'true', FALSE)
           } ORDER BY a.attempt_ordinal, a.start_time))::VARCHAR AS attempts
    FROM spans a
    JOIN owner_layer o ON o.logical_request_id = a.logical_request_id AND o.layer = a.layer
    JOIN sampled q ON q.logical_request_id = a.logical_request_id
    WHERE a.span_role = 'attempt'
    GROUP BY a.logical_request_id
),
routing AS (
    SELECT logical_request_id,
           to_json(list({'time_ns': epoch_ns(e.time), 'attributes': e.attributes}
                        ORDER BY epoch_ns(e.time), n))::VARCHAR AS routing
    FROM (
        SELECT logical_request_id, unnest(events) AS e,
               generate_subscripts(events, 1) AS n
        FROM spans
        WHERE span_role = 'logical_request' AND len(events) > 0
          AND logical_request_id IN (SELECT logical_request_id FROM sampled)
    )
    WHERE e.name = 'retryscope.routing'
    GROUP BY logical_request_id
),
evaluated AS (
    SELECT q.logical_request_id, q.trace_id, q.span_id, q.policy_digest,
           unnest(from_json(
               rs_policy_drift(q.document, q.policy_digest, q.terminal, q.ended_ns,
                               coalesce(a.attempts, '[]'), q.logical_request_digest,
                               q.idempotency_digest, q.deadline_ns, g.routing),
               '[{"drift":"VARCHAR","check":"VARCHAR","field":"VARCHAR",
                  "attempt_ordinal":"BIGINT","route_id":"VARCHAR","time_ns":"BIGINT",
                  "observed":"JSON","planned":"JSON","message":"VARCHAR"}]'
           )) AS d
    FROM sampled q
    LEFT JOIN attempts a ON a.logical_request_id = q.logical_request_id
    LEFT JOIN routing g ON g.logical_request_id = q.logical_request_id
)
SELECT logical_request_id, trace_id, span_id, policy_digest,
       d.drift AS drift, d."check" AS "check", d.field AS field,
       d.attempt_ordinal AS attempt_ordinal, d.route_id AS route_id,
       make_timestamp_ns(d.time_ns) AS time,
       d.observed AS observed, d.planned AS planned, d.message AS message
FROM evaluated
-- a constant when the query is bound: with no known policy the whole plan is folded
-- away (DuckDB would otherwise scan the spans three times to find no request)
WHERE getvariable('rs_policies_known');

-- whether the data set carries any policy document, for the filter above (set with the
-- macros: they are created again before each use)
SET VARIABLE rs_policies_known = (SELECT count(*) > 0 FROM known_policies());
