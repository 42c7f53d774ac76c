-- The model's tables across requests, built after its per-request tables (over all of
-- them: every time partition's, with the requests that straddle partitions built again
-- from all their spans), run by retryscope.analytics.model._build: each reads every
-- request, so a new partition rebuilds these (and only these) over the whole model. The
-- unfiltered scope's route latency and doomed dispatches (retryscope.analytics._scope_facts)
-- are built next.

-- Idempotency digests shared by requests with different request digests (one key reused
-- for different work), whichever requests are in scope. Grouped on hashes of the digests
-- (request_digest_hashes; a group of more than one request digest hash has two that
-- differ); only the (rare) requests of such a hash are looked up again as strings.
CREATE OR REPLACE TEMP TABLE idempotency_conflicts AS
WITH reused AS (
    SELECT idempotency_hash
    FROM request_digest_hashes
    GROUP BY 1
    HAVING min(request_hash) <> max(request_hash)
),
conflicting AS (
    SELECT h FROM request_digest_hashes SEMI JOIN reused USING (idempotency_hash)
)
SELECT r.idempotency_digest, count(DISTINCT r.logical_request_digest) AS digests
FROM request_base r
JOIN conflicting c ON c.h = r.h
GROUP BY r.idempotency_digest
HAVING count(DISTINCT r.logical_request_digest) > 1;
