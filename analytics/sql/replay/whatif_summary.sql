-- What-if summary: recorded figures next to the replayed range. `replayed_low` counts only
-- what is known (unknown requests make at least one more attempt, succeed and meet their
-- deadline); `replayed_high` assumes every unknown request succeeds after all attempts the
-- new policy allows, each costing its last recorded attempt (NULL: unbounded, when the new
-- policy sets no attempt limit). $max_attempts ... $window_ms: see whatif.sql.
WITH r AS (
    SELECT * FROM whatif_requests($max_attempts, $no_fallback, $max_backoff_ms,
                                  $retry_budget, $window_ms)
),
t AS (
    SELECT count(*) AS n,
           count(*) FILTER (WHERE replayed_status = 'unknown') AS unknown,
           count(*) FILTER (WHERE estimated) AS estimated,
           coalesce(sum(recorded_attempts), 0)::BIGINT AS rec_attempts,
           coalesce(sum(replayed_attempts), 0)::BIGINT AS rep_attempts,
           CASE WHEN bool_or(replayed_status = 'unknown' AND unknown_extra_attempts_max IS NULL)
                THEN NULL
                ELSE coalesce(sum(unknown_extra_attempts_max), 0) END::BIGINT AS extra_high,
           coalesce(sum(recorded_cost_micros), 0)::BIGINT AS rec_cost,
           coalesce(sum(replayed_cost_micros), 0)::BIGINT AS rep_cost,
           CASE WHEN bool_or(replayed_status = 'unknown' AND unknown_extra_attempts_max IS NULL)
                THEN NULL
                ELSE coalesce(sum(unknown_extra_attempts_max
                                  * unknown_cost_per_attempt_micros), 0) END::BIGINT
               AS extra_cost_high,
           count(*) FILTER (WHERE recorded_success) AS rec_success,
           count(*) FILTER (WHERE replayed_status = 'success') AS rep_success,
           count(*) FILTER (WHERE recorded_deadline_miss) AS rec_miss,
           count(*) FILTER (WHERE replayed_deadline_miss) AS rep_miss
    FROM r
)
SELECT metric, recorded, replayed_low, replayed_high, estimated_requests, unknown_requests
FROM (
    SELECT 1 AS k, 'requests' AS metric, n::DOUBLE AS recorded, n::DOUBLE AS replayed_low,
           n::DOUBLE AS replayed_high, estimated, unknown FROM t
    UNION ALL
    SELECT 2, 'attempts', rec_attempts, rep_attempts + unknown,
           rep_attempts + extra_high, estimated, unknown FROM t
    UNION ALL
    SELECT 3, 'cost_micros', rec_cost, rep_cost, rep_cost + extra_cost_high,
           estimated, unknown FROM t
    UNION ALL
    SELECT 4, 'successes', rec_success, rep_success, rep_success + unknown,
           estimated, unknown FROM t
    UNION ALL
    SELECT 5, 'success_rate', rs_ratio(rec_success, n), rs_ratio(rep_success, n),
           rs_ratio(rep_success + unknown, n), estimated, unknown FROM t
    UNION ALL
    SELECT 6, 'deadline_misses', rec_miss, rep_miss, rep_miss + unknown,
           estimated, unknown FROM t
) AS s(k, metric, recorded, replayed_low, replayed_high, estimated_requests, unknown_requests)
ORDER BY k;
