-- Logical requests by terminal ('unknown' when no terminal was recorded).
SELECT coalesce(terminal, 'unknown') AS terminal, count(*)::BIGINT AS n
FROM requests GROUP BY ALL ORDER BY n DESC, terminal;
