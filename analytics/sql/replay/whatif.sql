-- What-if replay: the in-scope requests re-decided under another policy, from their
-- recorded attempts at the retry owner's layer (the outermost layer of each request),
-- ordered by ordinal. A request is cut at its first attempt the new policy would not make:
--   attempts  ordinal > max_attempts;
--   fallback  a fallback attempt (is_fallback, or route priority > 0) when no_fallback;
--   budget    a retry beyond the retry budget of its time window: in each window of
--             window_ms, retries (ordinal > 1) are admitted in start order while at most
--             floor(retry_budget x first attempts started in the window) were admitted.
--             Denials are counted on the recorded retries, so a window where earlier cuts
--             would have freed budget is judged conservatively (more denials).
-- A lower backoff cap starts each retry earlier by recorded delay - max(cap, Retry-After);
-- the shift accumulates over the request. Outcomes are the recorded ones: after a cut the
-- request fails for certain (the policy stops); a shifted attempt keeps its recorded
-- outcome though it would have run at another time (an estimate); a request the new
-- policy would retry beyond the recording (more attempts allowed after stop_attempt_budget,
-- or time freed by the cap after stop_deadline) has an unknown outcome.
CREATE OR REPLACE MACRO whatif_requests(max_attempts, no_fallback, max_backoff_ms,
                                        retry_budget, window_ms) AS TABLE
WITH owner AS (
    SELECT logical_request_id, arg_min(layer, rs_layer_rank(layer)) AS layer
    FROM physical_attempts
    WHERE logical_request_id IN (SELECT logical_request_id FROM requests)
    GROUP BY logical_request_id
),
a AS (
    SELECT p.logical_request_id, p.start_time, p.end_time, p.route_id, p.outcome,
           coalesce(p.is_fallback, coalesce(p.route_priority, 0) > 0) AS is_fallback,
           coalesce(p.backoff_delay_ms, 0) AS backoff_delay_ms,
           coalesce(p.retry_after_ms, 0) AS retry_after_ms,
           p.cost_micros AS cost,
           row_number() OVER (PARTITION BY p.logical_request_id
                              ORDER BY p.attempt_ordinal, p.start_time) AS ord,
           time_bucket(to_milliseconds(window_ms::BIGINT), p.start_time::TIMESTAMP) AS win
    FROM physical_attempts p
    JOIN owner o ON o.logical_request_id = p.logical_request_id AND o.layer = p.layer
),
ranked AS (
    SELECT a.*,
           count(*) FILTER (WHERE ord = 1) OVER (PARTITION BY win) AS firsts_in_window,
           row_number() OVER (PARTITION BY win, ord > 1
                              ORDER BY start_time, logical_request_id) AS rank_in_window
    FROM a
),
marked AS (
    SELECT *,
           CASE
               WHEN max_attempts IS NOT NULL AND ord > max_attempts::INTEGER THEN 'attempts'
               WHEN coalesce(no_fallback::BOOLEAN, FALSE) AND is_fallback THEN 'fallback'
               WHEN retry_budget IS NOT NULL AND ord > 1
                    AND rank_in_window > floor(retry_budget::DOUBLE * firsts_in_window)
                   THEN 'budget'
           END AS denied_by,
           CASE WHEN max_backoff_ms IS NULL OR ord = 1 THEN 0
                ELSE greatest(0, backoff_delay_ms
                                 - greatest(max_backoff_ms::BIGINT, retry_after_ms)) END
               AS saved_ms
    FROM ranked
),
cut AS (
    SELECT *,
           min(CASE WHEN denied_by IS NOT NULL THEN ord END)
               OVER (PARTITION BY logical_request_id) AS cut_ord,
           sum(saved_ms) OVER (PARTITION BY logical_request_id ORDER BY ord
                               ROWS UNBOUNDED PRECEDING) AS shift_ms
    FROM marked
),
per AS (
    SELECT c.logical_request_id,
           count(*) AS recorded_attempts,
           count(*) FILTER (WHERE cut_ord IS NULL OR ord < cut_ord) AS kept_attempts,
           sum(cost)::BIGINT AS recorded_cost,
           coalesce(sum(cost) FILTER (WHERE cut_ord IS NULL OR ord < cut_ord), 0)::BIGINT
               AS kept_cost,
           arg_max(cost, ord) AS last_cost,
           bool_or(outcome = 'success') AS recorded_success,
           coalesce(bool_or(outcome = 'success')
                    FILTER (WHERE cut_ord IS NULL OR ord < cut_ord), FALSE) AS kept_success,
           arg_max(outcome, ord) AS last_outcome,
           any_value(cut_ord) AS cut_ord,
           any_value(denied_by) FILTER (WHERE ord = cut_ord) AS denied_by,
           max(epoch_ns(end_time)) AS recorded_end_ns,
           max(epoch_ns(end_time)) FILTER (WHERE outcome = 'success') AS success_end_ns,
           max(shift_ms) FILTER (WHERE outcome = 'success') AS success_shift_ms,
           max(epoch_ns(start_time) - shift_ms * 1000000) FILTER (WHERE ord = cut_ord)
               AS cut_start_ns,
           max(shift_ms) AS total_shift_ms
    FROM cut c
    GROUP BY c.logical_request_id
),
decided AS (
    SELECT p.*, r.trace_id, r.terminal, epoch_ns(r.deadline) AS deadline_ns,
           CASE
               WHEN p.kept_success THEN 'success'
               WHEN p.cut_ord IS NOT NULL THEN 'failed'
               WHEN p.last_outcome = 'retryable' AND (
                       (max_attempts IS NOT NULL AND r.terminal = 'stop_attempt_budget'
                        AND max_attempts::INTEGER > p.recorded_attempts)
                    OR (p.total_shift_ms > 0 AND rs_deadline_exhausted(r.terminal)))
                   THEN 'unknown'
               ELSE 'failed'
           END AS replayed_status,
           r.deadline_missed AS recorded_deadline_miss  -- the report's (request_facts.sql)
    FROM per p JOIN request_facts r ON r.logical_request_id = p.logical_request_id
)
SELECT logical_request_id, trace_id, terminal AS recorded_terminal,
       recorded_success, recorded_deadline_miss,
       recorded_attempts, kept_attempts AS replayed_attempts,
       recorded_cost AS recorded_cost_micros, kept_cost AS replayed_cost_micros,
       CASE WHEN replayed_status = 'unknown' THEN last_cost ELSE 0 END
           AS unknown_cost_per_attempt_micros,
       CASE WHEN replayed_status = 'unknown' AND max_attempts IS NOT NULL
            THEN max_attempts::INTEGER - recorded_attempts END AS unknown_extra_attempts_max,
       replayed_status, denied_by AS cut_by, cut_ord AS cut_at_attempt,
       total_shift_ms::BIGINT AS shift_ms,
       CASE replayed_status
           WHEN 'success' THEN deadline_ns IS NOT NULL
               AND rs_late(success_end_ns - coalesce(success_shift_ms, 0) * 1000000, deadline_ns)
           WHEN 'failed' THEN CASE WHEN cut_ord IS NOT NULL
                                   THEN deadline_ns IS NOT NULL AND cut_start_ns >= deadline_ns
                                   ELSE recorded_deadline_miss END
       END AS replayed_deadline_miss,
       (replayed_status = 'success' AND coalesce(success_shift_ms, 0) > 0) AS estimated
FROM decided
ORDER BY logical_request_id;
