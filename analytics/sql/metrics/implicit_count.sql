-- The in-scope logical requests that are implicit (implicit_requests.sql: no span named
-- them; the outermost logical operation above their sends is their request span).
SELECT count(*) FILTER (WHERE rs_implicit(logical_request_id))::BIGINT AS n FROM requests;
