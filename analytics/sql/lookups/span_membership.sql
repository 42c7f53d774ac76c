-- The data set's spans and how many of them name a logical request: read only when the
-- data set holds no logical request, to say why (retryscope.analytics._empty).
SELECT count(*)::BIGINT AS spans, count(logical_request_id)::BIGINT AS stamped FROM spans;
