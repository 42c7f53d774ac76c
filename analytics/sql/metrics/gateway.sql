-- Attempts a gateway or proxy behind the sends reports (LiteLLM proxy, Portkey, Envoy:
-- retryscope.http_rules.GATEWAY_ATTEMPT_HEADERS), beside the sends observed: the sends in
-- scope whose response carried a count, the attempts those responses report and the
-- retries among them (rs_gateway_retries). Reported by the other side, never added to
-- receiver_attempts.
SELECT
    count(*) FILTER (WHERE gateway_attempts IS NOT NULL)::BIGINT AS reporting_sends,
    coalesce(sum(gateway_attempts), 0)::BIGINT AS reported_attempts,
    coalesce(sum(rs_gateway_retries(gateway_attempts)), 0)::BIGINT AS reported_retries
FROM attempt_facts
WHERE is_leaf;
