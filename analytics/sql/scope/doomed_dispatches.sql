-- Per in-scope request with any: how many of its attempts are doomed dispatches
-- (doomed_attempts.sql). A SELECT, stored by retryscope.analytics._scope_facts as
-- all_doomed_dispatches (every request: after the model's per-request tables, over all
-- of them) or scoped_doomed_dispatches.
SELECT h, count(*) AS doomed_dispatches
FROM doomed_attempts
GROUP BY h
