-- The in-scope rows when no filter is set: every logical request, so the views point at
-- the base tables themselves (no copy). scope.sql runs next (and scope_release.sql first
-- when the previous scope was filtered).

CREATE OR REPLACE TEMP VIEW requests AS SELECT * FROM request_base;
CREATE OR REPLACE TEMP VIEW attempt_facts AS SELECT * FROM all_attempt_facts;
CREATE OR REPLACE TEMP VIEW request_nesting AS SELECT * FROM all_request_nesting;
CREATE OR REPLACE TEMP VIEW request_layers AS SELECT * FROM all_request_layers;
CREATE OR REPLACE TEMP VIEW request_routes AS SELECT * FROM all_request_routes;
CREATE OR REPLACE TEMP VIEW receiver_traffic AS SELECT * FROM all_receiver_traffic;
