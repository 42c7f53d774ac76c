-- The copies a filtered scope made (scope_filtered.sql, scope_facts.py), dropped when the
-- next scope is unfiltered: nothing reads them any more.
DROP TABLE IF EXISTS scoped_requests;
DROP TABLE IF EXISTS scoped_attempt_facts;
DROP TABLE IF EXISTS scoped_request_nesting;
DROP TABLE IF EXISTS scoped_request_layers;
DROP TABLE IF EXISTS scoped_request_routes;
DROP TABLE IF EXISTS scoped_receiver_traffic;
DROP TABLE IF EXISTS scoped_route_latency;
DROP TABLE IF EXISTS scoped_request_facts;
DROP TABLE IF EXISTS scoped_doomed_dispatches;
