-- Headline counts of the report (the first report's keys).
SELECT
    (SELECT count(*) FROM requests)::BIGINT AS logical_requests,
    (SELECT count(*) FROM attempt_facts)::BIGINT AS physical_attempts,
    (SELECT count(*) FROM attempt_facts WHERE is_leaf)::BIGINT AS receiver_attempts,
    (SELECT count(*) FROM request_facts WHERE has_fallback)::BIGINT AS requests_with_fallback,
    (SELECT count(*) FROM requests WHERE terminal = 'stop_deadline')::BIGINT
        AS deadline_exhausted,
    (SELECT count(*) FROM requests WHERE terminal = 'complete')::BIGINT AS completed;
