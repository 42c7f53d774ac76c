-- The macros every analytics query uses, created by retryscope.analytics.connect()
-- (retryscope.analytics._macros adds those rendered from Python rule tables).

CREATE OR REPLACE MACRO rs_ratio(n, d) AS
    CASE WHEN d > 0 THEN n::DOUBLE / d ELSE 0.0 END;

CREATE OR REPLACE MACRO rs_ms(t) AS epoch_ns(t) / 1000000.0;

-- A success completing at or after the deadline loses to it (the control plane's rule).
CREATE OR REPLACE MACRO rs_late(end_time, deadline) AS end_time >= deadline;

-- The key the model groups and joins a logical request on: a 64-bit hash of its id (far
-- cheaper than the string), NULL for a span of no request.
CREATE OR REPLACE MACRO rs_request_key(id) AS CASE WHEN id IS NOT NULL THEN hash(id) END;

-- rs_layer_rank, rs_boundary_rank (from the vocabulary), rs_http_outcome and
-- rs_http_outcome_kind (from the recorder's HTTP status table) are rendered by
-- retryscope.analytics._macros.

-- The value of a slicing dimension for one row ('all' when not sliced).
CREATE OR REPLACE MACRO rs_dim(dim, route_id, route_release, tenant, operation, layer, t) AS
    CASE dim
        WHEN 'overall' THEN 'all'
        WHEN 'route' THEN route_id
        WHEN 'route_release' THEN route_release
        WHEN 'tenant' THEN tenant
        WHEN 'operation' THEN operation
        WHEN 'layer' THEN layer
        WHEN 'time_bucket' THEN strftime(
            time_bucket(getvariable('rs_bucket'), t::TIMESTAMP), '%Y-%m-%dT%H:%M:%SZ')
    END;

