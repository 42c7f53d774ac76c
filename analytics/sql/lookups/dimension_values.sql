-- The tenants, operations and routes of the whole data set (filters not applied), with how
-- many logical requests carry each: the choices an interactive filter offers.
SELECT 'tenant' AS dimension, tenant AS value, count(*)::BIGINT AS logical_requests
FROM request_base
WHERE tenant IS NOT NULL
GROUP BY tenant
UNION ALL
SELECT 'operation', operation, count(*)::BIGINT
FROM request_base
WHERE operation IS NOT NULL
GROUP BY operation
UNION ALL
-- requests by their key h (a 64-bit hash of the id): far cheaper to count than the string
SELECT 'route', route_id, count(DISTINCT h)::BIGINT
FROM physical_attempts
WHERE route_id IS NOT NULL
GROUP BY route_id
ORDER BY dimension, value;
