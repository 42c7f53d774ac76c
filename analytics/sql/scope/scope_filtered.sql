-- The in-scope rows when a filter is set: copies of the base tables restricted to the
-- logical requests the filters select. Filters are DuckDB variables (rs_since, rs_until,
-- rs_route, rs_tenant, rs_operation); NULL means "no filter". scope.sql runs next.

CREATE OR REPLACE TEMP TABLE scoped_requests AS
SELECT * FROM request_base
WHERE (getvariable('rs_since') IS NULL OR started_at >= getvariable('rs_since'))
  AND (getvariable('rs_until') IS NULL OR started_at < getvariable('rs_until'))
  AND (getvariable('rs_tenant') IS NULL OR tenant = getvariable('rs_tenant'))
  AND (getvariable('rs_operation') IS NULL OR operation = getvariable('rs_operation'))
  AND (getvariable('rs_route') IS NULL OR h IN (
        SELECT h FROM all_attempt_facts WHERE route_id = getvariable('rs_route')));

CREATE OR REPLACE TEMP TABLE scoped_attempt_facts AS
SELECT * FROM all_attempt_facts
WHERE h IN (SELECT h FROM scoped_requests);

CREATE OR REPLACE TEMP TABLE scoped_request_nesting AS
SELECT * FROM all_request_nesting
WHERE h IN (SELECT h FROM scoped_requests);

CREATE OR REPLACE TEMP TABLE scoped_request_layers AS
SELECT * FROM all_request_layers
WHERE h IN (SELECT h FROM scoped_requests);

CREATE OR REPLACE TEMP TABLE scoped_request_routes AS
SELECT * FROM all_request_routes
WHERE h IN (SELECT h FROM scoped_requests);

CREATE OR REPLACE TEMP TABLE scoped_receiver_traffic AS
SELECT * FROM all_receiver_traffic
WHERE h IN (SELECT h FROM scoped_requests);

-- The logical requests in scope of the current filters.
CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM scoped_requests;
-- Their attempts (columns: base.sql, all_attempt_facts).
CREATE OR REPLACE TEMP VIEW attempt_facts AS SELECT * FROM scoped_attempt_facts;
CREATE OR REPLACE TEMP VIEW request_nesting AS SELECT * FROM scoped_request_nesting;
CREATE OR REPLACE TEMP VIEW request_layers AS SELECT * FROM scoped_request_layers;
CREATE OR REPLACE TEMP VIEW request_routes AS SELECT * FROM scoped_request_routes;
CREATE OR REPLACE TEMP VIEW receiver_traffic AS SELECT * FROM scoped_receiver_traffic;
