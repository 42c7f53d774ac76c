-- The model's tables across requests, built after its per-request tables (over all of
-- them: every time partition's, with the requests that straddle partitions built again
-- from all their spans), run by retryscope.analytics.model._build: each reads every
-- request, so a new partition rebuilds these (and only these) over the whole model. The
-- unfiltered scope's route latency and doomed dispatches (retryscope.analytics._scope_facts)
-- are built next.

-- Idempotency digests shared by requests with different request digests (one key reused
-- for different work), whichever requests are in scope. Grouped on hashes of the digests;
-- only the (rare) conflicting digests are looked up again as strings.
CREATE OR REPLACE TEMP TABLE idempotency_conflicts AS
WITH keys AS (
    SELECT hash(idempotency_digest) AS k
    FROM request_base
    WHERE idempotency_digest IS NOT NULL AND logical_request_digest IS NOT NULL
    GROUP BY 1
    HAVING count(DISTINCT hash(logical_request_digest)) > 1
)
SELECT idempotency_digest, count(DISTINCT logical_request_digest) AS digests
FROM request_base
WHERE idempotency_digest IS NOT NULL AND logical_request_digest IS NOT NULL
  AND hash(idempotency_digest) IN (SELECT k FROM keys)
GROUP BY idempotency_digest
HAVING count(DISTINCT logical_request_digest) > 1;
