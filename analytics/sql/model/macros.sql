-- The macros every analytics query uses, created by retryscope.analytics.connect()
-- (retryscope.analytics._macros adds those rendered from Python rule tables).

CREATE OR REPLACE MACRO rs_ratio(n, d) AS
    CASE WHEN d > 0 THEN n::DOUBLE / d ELSE 0.0 END;

CREATE OR REPLACE MACRO rs_ms(t) AS epoch_ns(t) / 1000000.0;

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

-- The figures' rules, each written once here and used by every report, lookup, finding
-- and UI query (what each report key means: retryscope.analytics.REPORT_KEYS; where each
-- figure is defined: docs/guides/analytics.md, "Where each figure is defined"). They
-- aggregate or combine what the model decides once per attempt in all_attempt_facts
-- (model_requests.sql): is_leaf (a send), is_repeat, is_retry, group_size, accepted,
-- cost_micros.

-- Sends (receiver attempts): the attempts with no lower-layer attempt beneath them.
CREATE OR REPLACE MACRO rs_sends(span_id, is_leaf) AS count(span_id) FILTER (WHERE is_leaf);

-- Distinct operations among the sends: a send's operation ordinal runs 1..k under its
-- parent attempt, so the largest is the count (a send without one: 1); 0 without sends.
CREATE OR REPLACE MACRO rs_operations(operation_ordinal, is_leaf) AS
    coalesce(max(coalesce(operation_ordinal, 1)) FILTER (WHERE is_leaf), 0);

-- Resends (excess attempts): the sends beyond one per distinct operation.
CREATE OR REPLACE MACRO rs_resends(sends, operations) AS greatest(0, sends - operations);

-- Retry amplification: sends ÷ distinct operations (1.0: no layer retried).
CREATE OR REPLACE MACRO rs_amplification(sends, operations) AS rs_ratio(sends, operations);

-- Nesting: a layer of a request retried when its largest retry group (group_size: its
-- attempts that are not hedges) holds more than one attempt; the request's attempt
-- multiplication is the product of those largest groups (harness 3 × transport 3 = 9;
-- 1 when no layer retried); its retries are nested when two layers or more retried.
CREATE OR REPLACE MACRO rs_retried(max_n) AS max_n > 1;
CREATE OR REPLACE MACRO rs_multiplication(max_n) AS
    coalesce(round(exp(sum(ln(max_n)) FILTER (WHERE rs_retried(max_n))))::BIGINT, 1);
CREATE OR REPLACE MACRO rs_nested(retried_layer_count) AS retried_layer_count >= 2;

-- Fallback: a request used one when any attempt of it is on a fallback route
-- (request_facts.has_fallback), and a fallback answered it when an accepted attempt is
-- (rs_fallback_answer). The answer's quality, from the bindings of that attempt
-- (request_facts.fallback_*_bound): quality when it binds the required capability and
-- behavior class within the allowed data boundary; degraded when only the behavior class
-- differs; unverified when the data lacks a digest, class or boundary to check.
CREATE OR REPLACE MACRO rs_fallback_answer(accepted, is_fallback) AS accepted AND is_fallback;
CREATE OR REPLACE MACRO rs_fallback_quality(capability, behavior, boundary) AS
    capability AND behavior AND boundary;
CREATE OR REPLACE MACRO rs_fallback_degraded(capability, behavior, boundary) AS
    capability AND boundary AND NOT behavior;
CREATE OR REPLACE MACRO rs_fallback_unverified(capability, behavior, boundary) AS
    capability IS NULL OR behavior IS NULL OR boundary IS NULL;

-- Deadline exhaustion: the request stopped because its deadline ran out.
CREATE OR REPLACE MACRO rs_deadline_exhausted(terminal) AS terminal = 'stop_deadline';

-- A late success: a success completing at or after the deadline loses to it (the control
-- plane's rule).
CREATE OR REPLACE MACRO rs_late(end_time, deadline) AS end_time >= deadline;
CREATE OR REPLACE MACRO rs_late_success(outcome, end_time, deadline) AS
    outcome = 'success' AND rs_late(end_time, deadline);

-- Cost: an attempt's measured cost, else its reservation (then an estimate, as when the
-- recorder marks it estimated), else 0; the cost figures count the attempts that
-- recorded either. Wasted cost: the cost of the attempts whose result was not accepted.
CREATE OR REPLACE MACRO rs_cost_micros(actual, reserved) AS coalesce(actual, reserved, 0);
CREATE OR REPLACE MACRO rs_cost_is_estimate(actual, reserved, estimated) AS
    (actual IS NULL AND reserved IS NOT NULL) OR coalesce(estimated, FALSE);
CREATE OR REPLACE MACRO rs_has_cost(actual, reserved) AS
    reserved IS NOT NULL OR actual IS NOT NULL;
CREATE OR REPLACE MACRO rs_wasted_micros(cost_micros, accepted) AS
    coalesce(sum(cost_micros) FILTER (WHERE NOT accepted), 0)::BIGINT;

-- Retries judged for effectiveness: retries after an attempt that did not succeed, by
-- the failure kind before them; their successes.
CREATE OR REPLACE MACRO rs_retry_after_failure(is_retry, prev_outcome) AS
    is_retry AND coalesce(prev_outcome, '') <> 'success';
CREATE OR REPLACE MACRO rs_after_kind(prev_kind, prev_outcome) AS
    coalesce(prev_kind, prev_outcome, 'unknown');
CREATE OR REPLACE MACRO rs_successes(outcome) AS count(*) FILTER (WHERE outcome = 'success');

-- Opaque retry ownership: a retry owner dispatching through a lower layer that declares
-- retries of its own.
CREATE OR REPLACE MACRO rs_opaque_ownership(retry_owner, lower_max_retries) AS
    retry_owner IS NOT NULL AND coalesce(lower_max_retries, 0) > 0;

-- Retries a gateway or proxy behind a send reports for its response (its attempts beyond
-- the first): remote, reported by the other side, kept beside the observed sends and never
-- added to them (NULL attempts: the response said nothing).
CREATE OR REPLACE MACRO rs_gateway_retries(gateway_attempts) AS
    greatest(0, gateway_attempts - 1);

-- Implicit logical requests (implicit_requests.sql): the outermost logical operation above
-- sends of no logical request, named by its trace and span id.
CREATE OR REPLACE MACRO rs_implicit_request_id(trace_id, span_id) AS
    'implicit:' || trace_id || ':' || span_id;
CREATE OR REPLACE MACRO rs_implicit(id) AS starts_with(id, 'implicit:');
CREATE OR REPLACE MACRO rs_implicit_trace(id) AS
    CASE WHEN rs_implicit(id) THEN split_part(id, ':', 2) END;
-- The key of a trace's implicit requests taken together (a request key no implicit
-- request has): the spans of no logical request of one trace are built together.
CREATE OR REPLACE MACRO rs_implicit_trace_key(trace_id) AS
    rs_request_key(rs_implicit_request_id(trace_id, ''));

-- Resends per route: a route's sends that repeat an operation the request already sent,
-- on this route or another (is_repeat: a fallback's send repeats the primary's). Summed
-- over the routes they are the request's resends (rs_resends), as the layers' are.
CREATE OR REPLACE MACRO rs_repeat_sends(span_id, is_repeat) AS
    count(span_id) FILTER (WHERE is_repeat);

-- The headline's ratios of additive parts, each the report's figure and the one the
-- Overview reads from the rollups (sql/model/rollup_*.sql): sends per logical request;
-- the share of requests that used a fallback, and that ran out of their deadline; cost of
-- every attempt ÷ cost of the accepted ones.
CREATE OR REPLACE MACRO rs_sends_per_request(sends, requests) AS rs_ratio(sends, requests);
CREATE OR REPLACE MACRO rs_fallback_rate(fallbacks, requests) AS rs_ratio(fallbacks, requests);
CREATE OR REPLACE MACRO rs_deadline_exhausted_rate(exhausted, requests) AS
    rs_ratio(exhausted, requests);
CREATE OR REPLACE MACRO rs_cost_amplification(total, accepted) AS rs_ratio(total, accepted);

-- The time grain of the rollups: a request counts in the hour it started (the time
-- partition's; a minute's grain holds ten times the rows at 100 M attempts and makes the
-- headline's sums over them the slowest part of opening the Overview).
CREATE OR REPLACE MACRO rs_rollup_hour(t) AS date_trunc('hour', t);
-- Whether a rollup row's requests are those filters select (scope_filtered.sql: started
-- in [since, until), of tenant and operation, with an attempt on route; NULL: any), for
-- bounds on whole hours (retryscope.analytics._headline.split_hours).
CREATE OR REPLACE MACRO rs_rollup_selects(
        hour, tenant, operation, routes, since, until, want_tenant, want_operation,
        want_route) AS
    (since IS NULL OR hour >= since) AND (until IS NULL OR hour < until)
    AND (want_tenant IS NULL OR tenant = want_tenant)
    AND (want_operation IS NULL OR operation = want_operation)
    AND (want_route IS NULL OR list_contains(routes, want_route));

-- Over any set of requests (the report's whole scope, a slice, a breakdown's value and
-- time bucket, a rollup row): the requests that fell back (has_fallback: request_facts.sql)
-- and those the deadline stopped (rs_deadline_exhausted); their shares are
-- rs_fallback_rate and rs_deadline_exhausted_rate of these counts.
CREATE OR REPLACE MACRO rs_fallback_requests(has_fallback) AS
    count(*) FILTER (WHERE has_fallback);
CREATE OR REPLACE MACRO rs_exhausted_requests(terminal) AS
    count(*) FILTER (WHERE rs_deadline_exhausted(terminal));

-- Work after the deadline: how long past its deadline a request ended (NULL: within it,
-- or no deadline), and the cost of its attempts that ended at or after it (rs_late).
CREATE OR REPLACE MACRO rs_past_deadline_ms(ended_at, deadline) AS
    CASE WHEN ended_at > deadline THEN rs_ms(ended_at) - rs_ms(deadline) END;
CREATE OR REPLACE MACRO rs_cost_after_deadline(cost_micros, end_time, deadline) AS
    coalesce(sum(cost_micros) FILTER (WHERE rs_late(end_time, deadline)), 0)::BIGINT;
