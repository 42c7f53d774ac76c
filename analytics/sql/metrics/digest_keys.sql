-- Whether the data set's digests are keyed (HMAC-SHA-256 under a deployment key, whose id
-- the request span carries as `retryscope.digest.key_id`) or unkeyed SHA-256, which a
-- guessable idempotency key can be recovered from. Over the whole data set (filters do not
-- apply): request and continuation spans that carry a digest.
WITH requests AS (
    SELECT attributes['retryscope.digest.key_id'] AS key_id
    FROM spans
    WHERE span_role IN ('logical_request', 'continuation')
      AND (idempotency_digest IS NOT NULL OR logical_request_digest IS NOT NULL)
)
SELECT
    count(*) FILTER (WHERE key_id IS NOT NULL)::BIGINT AS keyed_requests,
    count(*) FILTER (WHERE key_id IS NULL)::BIGINT AS unkeyed_requests,
    count(DISTINCT key_id)::BIGINT AS key_ids
FROM requests;
