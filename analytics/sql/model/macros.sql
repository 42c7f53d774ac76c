-- The macros every analytics query uses, created by retryscope.analytics.connect().

CREATE OR REPLACE MACRO rs_layer_rank(l) AS
    CASE l WHEN 'workflow' THEN 0 WHEN 'queue' THEN 1 WHEN 'harness' THEN 2
           WHEN 'adapter' THEN 3 WHEN 'sdk' THEN 4 WHEN 'transport' THEN 5 ELSE 6 END;

CREATE OR REPLACE MACRO rs_boundary_rank(b) AS
    CASE b WHEN 'local_process' THEN 0 WHEN 'private_service' THEN 1
           WHEN 'external_provider' THEN 2 END;

CREATE OR REPLACE MACRO rs_ratio(n, d) AS
    CASE WHEN d > 0 THEN n::DOUBLE / d ELSE 0.0 END;

CREATE OR REPLACE MACRO rs_ms(t) AS epoch_ns(t) / 1000000.0;

-- Outcome of an HTTP send that recorded no retryscope outcome, from its status code (a
-- transport attempt: marked by the stamping processor or classified here).
CREATE OR REPLACE MACRO rs_http_outcome(http_status, span_status) AS
    CASE
        WHEN http_status BETWEEN 200 AND 399 THEN 'success'
        WHEN http_status IN (408, 429) OR http_status >= 500 THEN 'retryable'
        WHEN http_status >= 400 THEN 'non_retryable'
        WHEN span_status = 'ERROR' THEN 'retryable'
    END;

CREATE OR REPLACE MACRO rs_http_outcome_kind(http_status, span_status) AS
    CASE
        WHEN http_status = 429 THEN 'rate_limited'
        WHEN http_status = 408 THEN 'timeout_before_response'
        WHEN http_status >= 500 THEN 'unavailable'
        WHEN http_status IN (401, 403) THEN 'rejected'
        WHEN http_status >= 400 THEN 'invalid_request'
        WHEN http_status IS NULL AND span_status = 'ERROR' THEN 'timeout_before_response'
    END;

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

