-- Whether the data set's digests are keyed (HMAC-SHA-256 under a deployment key, whose id
-- the request span carries as `retryscope.digest.key_id`) or unkeyed SHA-256, which a
-- guessable idempotency key can be recovered from. Over the whole data set (filters do not
-- apply): request and continuation spans that carry a digest, counted per request and key
-- id by the model (digest_spans, model_requests.sql).
SELECT
    coalesce(sum(spans) FILTER (WHERE key_id IS NOT NULL), 0)::BIGINT AS keyed_requests,
    coalesce(sum(spans) FILTER (WHERE key_id IS NULL), 0)::BIGINT AS unkeyed_requests,
    count(DISTINCT key_id)::BIGINT AS key_ids
FROM digest_spans;
