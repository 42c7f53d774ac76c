"""The attribute vocabulary: every span attribute retryscope writes, in one place.

This module is the contract between instrumentation, analytics and dashboards. Each
:class:`Attr` names an OpenTelemetry attribute key and the dedicated Parquet column it is
stored in (see :mod:`retryscope.schema`, which is derived from :data:`DEDICATED`). Keys of
our own start with ``retryscope.``; where OpenTelemetry semantic conventions already name
the thing (``error.type``, ``http.request.resend_count``, ``gen_ai.*``) we reuse their key.

Domain values (outcomes, kinds, layers, owners, terminals) are enums whose ``value`` is the
exact string written to spans and Parquet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

SCHEMA_VERSION: Final = 2
"""Version of the Parquet schema; stored in each file's key-value metadata. 2: the logical
request span no longer carries attempt counts (``attempt_count``, ``attempts_<layer>``,
``retried_layers``); the analytics count attempts over every process's spans."""


class AttrType(enum.Enum):
    """How an attribute is typed on the span and in its Parquet column."""

    STR = "string"
    INT = "int64"
    INT32 = "int32"
    BOOL = "bool"
    FLOAT = "double"
    TIME_NS = "timestamp_ns"  # an int of unix nanoseconds on the span, a timestamp in Parquet


@dataclass(frozen=True, slots=True)
class Attr:
    """One attribute: its span key, its Parquet column and type, and what it means."""

    key: str
    column: str
    type: AttrType
    doc: str
    aliases: tuple[str, ...] = ()
    """Older keys with the same meaning (e.g. pre-stable HTTP semconv), read into the column."""


S, INT, I32, B, F, T = (
    AttrType.STR,
    AttrType.INT,
    AttrType.INT32,
    AttrType.BOOL,
    AttrType.FLOAT,
    AttrType.TIME_NS,
)

# --- identity of the logical request (stamped on every span beneath it) -------------------
SPAN_ROLE = Attr("retryscope.span.role", "span_role", S, "`logical_request` or `attempt`.")
LOGICAL_REQUEST_ID = Attr(
    "retryscope.logical_request.id", "logical_request_id", S, "Id of the logical request."
)
LOGICAL_REQUEST_DIGEST = Attr(
    "retryscope.logical_request.digest",
    "logical_request_digest",
    S,
    "Digest of the canonical JSON of the request payload (the payload itself is never kept): "
    "HMAC-SHA-256 under the deployment key, SHA-256 without one.",
)
IDEMPOTENCY_DIGEST = Attr(
    "retryscope.idempotency.digest",
    "idempotency_digest",
    S,
    "Domain-separated digest over tenant, operation and idempotency key (never the raw key): "
    "HMAC-SHA-256 under the deployment key (its id: `retryscope.digest.key_id` on the "
    "request span), SHA-256 without one.",
)
TENANT = Attr("retryscope.tenant", "tenant", S, "Tenant the request runs for.")
OPERATION = Attr("retryscope.operation", "operation", S, "Logical operation, e.g. `chat`.")
RETRY_OWNER = Attr(
    "retryscope.retry.owner", "retry_owner", S, "The one layer declared to own retries."
)
POLICY_DIGEST = Attr(
    "retryscope.policy.digest", "policy_digest", S, "SHA-256 of the retry policy in force."
)
DEADLINE = Attr(
    "retryscope.deadline", "deadline", T, "Absolute deadline of the logical request (unix ns)."
)
POLICY_DOCUMENT = Attr(
    "retryscope.policy.document",
    "policy_document",
    S,
    "On a logical request the control plane ran: the canonical JSON of the retry policy it "
    "enforced (its SHA-256 is `policy_digest`), so policy drift can be checked from the "
    "spans alone.",
)

# --- one physical attempt -------------------------------------------------------------------
LAYER = Attr(
    "retryscope.attempt.layer",
    "layer",
    S,
    "Layer that made the attempt: workflow, harness, adapter, sdk, transport, queue.",
)
ATTEMPT_ORDINAL = Attr(
    "retryscope.attempt.ordinal",
    "attempt_ordinal",
    I32,
    "1-based attempt number across the logical request, counted per layer (in a "
    "continuation: per layer within it, after the attempts its carrier counted; on "
    "non-attempt child spans: the enclosing attempt's).",
)
PARENT_ATTEMPT_ORDINAL = Attr(
    "retryscope.attempt.parent_ordinal",
    "parent_attempt_ordinal",
    I32,
    "Ordinal of the enclosing attempt one layer up (e.g. the harness attempt a transport "
    "resend belongs to); absent on outermost attempts.",
)
PARENT_LAYER = Attr(
    "retryscope.attempt.parent_layer",
    "parent_layer",
    S,
    "Layer of the enclosing attempt; absent on outermost attempts.",
)
ROUTE_ATTEMPT_ORDINAL = Attr(
    "retryscope.attempt.route_ordinal",
    "route_attempt_ordinal",
    I32,
    "1-based attempt number on this route (per layer).",
)
ROUTE_ID = Attr("retryscope.route.id", "route_id", S, "Route the attempt was dispatched to.")
ROUTE_RELEASE = Attr(
    "retryscope.route.release",
    "route_release",
    S,
    "Exact release of the route (adapter/model/provider path or its digest).",
)
ROUTE_PRIORITY = Attr(
    "retryscope.route.priority", "route_priority", I32, "Route priority; 0 is the primary."
)
FALLBACK = Attr("retryscope.route.fallback", "is_fallback", B, "True when not the primary route.")
BACKOFF_DELAY_MS = Attr(
    "retryscope.backoff.delay_ms",
    "backoff_delay_ms",
    INT,
    "Delay scheduled before this attempt (after the previous one completed).",
)
RETRY_AFTER_MS = Attr(
    "retryscope.backoff.retry_after_ms",
    "retry_after_ms",
    INT,
    "Bounded Retry-After hint the previous attempt received, in ms.",
)
NOT_BEFORE = Attr(
    "retryscope.backoff.not_before", "not_before", T, "Earliest allowed start (unix ns)."
)
DEADLINE_REMAINING_MS = Attr(
    "retryscope.deadline.remaining_ms",
    "deadline_remaining_ms",
    INT,
    "Time left until the deadline when the attempt was dispatched.",
)
COST_RESERVED = Attr(
    "retryscope.cost.reserved_micros",
    "cost_reserved_micros",
    INT,
    "Worst-case cost reserved before dispatch, integer micro-units of the currency.",
)
COST_ACTUAL = Attr(
    "retryscope.cost.actual_micros",
    "cost_actual_micros",
    INT,
    "Actual cost committed after the attempt, integer micro-units.",
)
COST_CURRENCY = Attr("retryscope.cost.currency", "cost_currency", S, "ISO 4217 currency code.")
COST_ESTIMATED = Attr(
    "retryscope.cost.estimated",
    "cost_estimated",
    B,
    "True when usage was unknown and the reservation stands as the cost.",
)
OUTCOME = Attr(
    "retryscope.outcome",
    "outcome",
    S,
    "success, retryable, non_retryable or indeterminate.",
)
OUTCOME_KIND = Attr("retryscope.outcome.kind", "outcome_kind", S, "One of the ten failure kinds.")
DECISION = Attr(
    "retryscope.decision",
    "decision",
    S,
    "What the retry owner did after this attempt: complete, retry, fallback, stop.",
)
TERMINAL = Attr("retryscope.terminal", "terminal", S, "Terminal of the logical request.")
GAP_DROPPED_SPANS = Attr(
    "retryscope.gap.dropped_spans",
    "gap_dropped_spans",
    INT,
    "On a telemetry-gap record: spans known to be lost in its time window.",
)
GAP_REASON = Attr(
    "retryscope.gap.reason",
    "gap_reason",
    S,
    "On a telemetry-gap record: why spans were lost (e.g. buffer_full, queue_overflow).",
)

# --- route compatibility, hedging, breakers, lower layers, streams, prices, reconciliation
REQUIRED_CAPABILITY_DIGEST = Attr(
    "retryscope.capability.required_digest",
    "required_capability_digest",
    S,
    "On the logical request span: digest of the capability contract the request requires.",
)
REQUIRED_CAPABILITY_NAME = Attr(
    "retryscope.capability.required_name",
    "required_capability_name",
    S,
    "On the logical request span: a readable name of that capability contract (e.g. "
    "`chat/incident-severity/v1`), shown beside its digest; rules compare the digest.",
)
REQUIRED_BEHAVIOR_CLASS = Attr(
    "retryscope.behavior_class.required",
    "required_behavior_class",
    S,
    "On the logical request span: behavior class (or its digest) the request requires.",
)
REQUIRED_BEHAVIOR_CLASS_NAME = Attr(
    "retryscope.behavior_class.required_name",
    "required_behavior_class_name",
    S,
    "On the logical request span: a readable name of that behavior class, when the class "
    "is recorded as a digest; shown beside it, rules compare the class.",
)
MAX_DATA_BOUNDARY = Attr(
    "retryscope.data_boundary.max",
    "max_data_boundary",
    S,
    "On the logical request span: widest data boundary policy allows "
    "(local_process < private_service < external_provider).",
)
ROUTE_CAPABILITY_DIGEST = Attr(
    "retryscope.route.capability_digest",
    "route_capability_digest",
    S,
    "On an attempt: digest of the capability contract the route binds.",
)
ROUTE_CAPABILITY_NAME = Attr(
    "retryscope.route.capability_name",
    "route_capability_name",
    S,
    "On an attempt: a readable name of that capability contract, shown beside its digest; "
    "rules compare the digest.",
)
ROUTE_BEHAVIOR_CLASS = Attr(
    "retryscope.route.behavior_class",
    "route_behavior_class",
    S,
    "On an attempt: behavior class (or its digest) the route's release is evaluated for.",
)
ROUTE_BEHAVIOR_CLASS_NAME = Attr(
    "retryscope.route.behavior_class_name",
    "route_behavior_class_name",
    S,
    "On an attempt: a readable name of that behavior class, when the class is recorded as a "
    "digest; shown beside it, rules compare the class.",
)
ROUTE_DATA_BOUNDARY = Attr(
    "retryscope.route.data_boundary",
    "route_data_boundary",
    S,
    "On an attempt: data boundary of the route (local_process, private_service, "
    "external_provider).",
)
HEDGE_ORDINAL = Attr(
    "retryscope.hedge.ordinal",
    "hedge_ordinal",
    I32,
    "0 for the primary of a hedge group, 1, 2, … for hedges racing it; absent when the "
    "attempt is not part of a hedge group. Only hedges may overlap in time.",
)
HEDGE_RESULT = Attr(
    "retryscope.hedge.result",
    "hedge_result",
    S,
    "On a hedged attempt: winner (committed) or cancelled (lost the race; its cost counts).",
)
BREAKER_STATE = Attr(
    "retryscope.breaker.state",
    "breaker_state",
    S,
    "The route's circuit-breaker state at dispatch: closed, open or half_open.",
)
PRICE_TABLE_DIGEST = Attr(
    "retryscope.cost.price_table_digest",
    "price_table_digest",
    S,
    "SHA-256 of the canonical JSON of the price table that priced this attempt.",
)
LOWER_MAX_RETRIES = Attr(
    "retryscope.lower.max_retries",
    "lower_max_retries",
    I32,
    "Retries the layer below this attempt may still make on its own (e.g. an SDK client's "
    "max_retries); > 0 under a harness owner is a hidden multiplication.",
)
OPERATION_ORDINAL = Attr(
    "retryscope.operation.ordinal",
    "operation_ordinal",
    I32,
    "On a send: 1-based number of the distinct operation it belongs to under its parent "
    "attempt (a client call, or one distinct request), in order of first send; the sends of "
    "one operation share it, so resends are told from distinct calls.",
)
RETRY_LAYER = Attr(
    "retryscope.retry.layer",
    "retry_layer",
    S,
    "On a resend: the layer whose retry loop made it (`sdk` for an SDK's own retries, "
    "`transport` for an HTTP library's, `adapter` for a router's, `caller` for a loop above "
    "the client that marked none of its tries: the client called the repeat its first try).",
)
GATEWAY_ATTEMPTS = Attr(
    "retryscope.gateway.attempts",
    "gateway_attempts",
    I32,
    "On a send: the attempts a gateway or proxy behind it reports it made for this one "
    "response (1: no retry), from its response headers (`GATEWAY_ATTEMPT_HEADERS` in "
    "retryscope.http_rules): remote attempts of layer `gateway`, reported, not observed.",
)
CONTINUATION = Attr(
    "retryscope.continuation",
    "continuation",
    S,
    "On every span recorded inside a continuation of a logical request (retryscope.extract "
    "in another process or delivery): the continuation's id. An attempt is identified by "
    "(continuation, layer, ordinal) within its request: absent, the request's own process.",
)
PARENT_CONTINUATION = Attr(
    "retryscope.attempt.parent_continuation",
    "parent_continuation",
    S,
    "The continuation the enclosing attempt was recorded in (with `parent_layer` and "
    "`parent_attempt_ordinal`: that attempt, maybe in another process); absent when it was "
    "the request's own process.",
)
CALLER_RETRY_LAYER: Final = "caller"
"""The :data:`RETRY_LAYER` of a repeat after a failure that its client calls a first try: a
retry loop above the client (a framework's ``with_retry``, a decorator, a ``for`` loop) that
opened no attempt per try. Not an attempt :class:`Layer`: nothing records its tries but
their sends."""
OPERATION_TRY = Attr(
    "retryscope.operation.try",
    "operation_try",
    I32,
    "On a send of an operation a caller above its client repeated (`retryscope.retry.layer` "
    "`caller`): which of the caller's tries it belongs to (2, 3, …); absent on the first "
    "try. The sends of one try are the client's own retries.",
)
STREAM_EVENTS = Attr(
    "retryscope.stream.events",
    "stream_events",
    INT,
    "Streamed events delivered to the caller by this attempt.",
)
RECONCILIATION_RESULT = Attr(
    "retryscope.reconciliation.result",
    "reconciliation_result",
    S,
    "On the logical request span: result of the last reconciliation "
    "(effect_confirmed, no_effect, unknown); each one is also an event.",
)


# --- OpenTelemetry semantic conventions we reuse ---------------------------------------------
ERROR_TYPE = Attr("error.type", "error_type", S, "OTel `error.type`: class of the error.")
HTTP_STATUS_CODE = Attr(
    "http.response.status_code",
    "http_status_code",
    I32,
    "OTel HTTP response status code.",
    aliases=("http.status_code",),
)
HTTP_RESEND_COUNT = Attr(
    "http.request.resend_count",
    "http_resend_count",
    I32,
    "OTel: ordinal of this HTTP resend within one client operation: set only on a send "
    "that repeats an earlier send of the same operation (same method, URL and body, or the "
    "client's own retry evidence); a distinct call is not a resend.",
)
HTTP_METHOD = Attr(
    "http.request.method",
    "http_method",
    S,
    "OTel HTTP request method.",
    aliases=("http.method",),
)
GEN_AI_PROVIDER = Attr("gen_ai.provider.name", "gen_ai_provider_name", S, "OTel GenAI provider.")
GEN_AI_REQUEST_MODEL = Attr(
    "gen_ai.request.model", "gen_ai_request_model", S, "OTel GenAI requested model."
)
GEN_AI_RESPONSE_MODEL = Attr(
    "gen_ai.response.model", "gen_ai_response_model", S, "OTel GenAI model that answered."
)
GEN_AI_OPERATION = Attr(
    "gen_ai.operation.name", "gen_ai_operation_name", S, "OTel GenAI operation name."
)
GEN_AI_RESPONSE_ID = Attr("gen_ai.response.id", "gen_ai_response_id", S, "OTel GenAI response id.")
GEN_AI_INPUT_TOKENS = Attr(
    "gen_ai.usage.input_tokens", "gen_ai_input_tokens", INT, "OTel GenAI input tokens."
)
GEN_AI_OUTPUT_TOKENS = Attr(
    "gen_ai.usage.output_tokens", "gen_ai_output_tokens", INT, "OTel GenAI output tokens."
)

DEDICATED: Final[tuple[Attr, ...]] = (
    SPAN_ROLE,
    LOGICAL_REQUEST_ID,
    LOGICAL_REQUEST_DIGEST,
    IDEMPOTENCY_DIGEST,
    TENANT,
    OPERATION,
    RETRY_OWNER,
    POLICY_DIGEST,
    DEADLINE,
    POLICY_DOCUMENT,
    LAYER,
    ATTEMPT_ORDINAL,
    PARENT_ATTEMPT_ORDINAL,
    PARENT_LAYER,
    ROUTE_ATTEMPT_ORDINAL,
    ROUTE_ID,
    ROUTE_RELEASE,
    ROUTE_PRIORITY,
    FALLBACK,
    BACKOFF_DELAY_MS,
    RETRY_AFTER_MS,
    NOT_BEFORE,
    DEADLINE_REMAINING_MS,
    COST_RESERVED,
    COST_ACTUAL,
    COST_CURRENCY,
    COST_ESTIMATED,
    OUTCOME,
    OUTCOME_KIND,
    DECISION,
    TERMINAL,
    GAP_DROPPED_SPANS,
    GAP_REASON,
    REQUIRED_CAPABILITY_DIGEST,
    REQUIRED_CAPABILITY_NAME,
    REQUIRED_BEHAVIOR_CLASS,
    REQUIRED_BEHAVIOR_CLASS_NAME,
    MAX_DATA_BOUNDARY,
    ROUTE_CAPABILITY_DIGEST,
    ROUTE_CAPABILITY_NAME,
    ROUTE_BEHAVIOR_CLASS,
    ROUTE_BEHAVIOR_CLASS_NAME,
    ROUTE_DATA_BOUNDARY,
    ERROR_TYPE,
    HTTP_STATUS_CODE,
    HTTP_RESEND_COUNT,
    HTTP_METHOD,
    GEN_AI_PROVIDER,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_OPERATION,
    GEN_AI_RESPONSE_ID,
    GEN_AI_INPUT_TOKENS,
    GEN_AI_OUTPUT_TOKENS,
    HEDGE_ORDINAL,
    HEDGE_RESULT,
    BREAKER_STATE,
    PRICE_TABLE_DIGEST,
    LOWER_MAX_RETRIES,
    STREAM_EVENTS,
    RECONCILIATION_RESULT,
    OPERATION_ORDINAL,
    RETRY_LAYER,
    OPERATION_TRY,
    GATEWAY_ATTEMPTS,
    CONTINUATION,
    PARENT_CONTINUATION,
)
"""Attributes stored in dedicated typed Parquet columns, in column order."""

BY_KEY: Final[dict[str, Attr]] = {
    **{alias: a for a in DEDICATED for alias in a.aliases},
    **{a.key: a for a in DEDICATED},
}
"""Dedicated attribute by span key, aliases included (the current key wins)."""


# --- domain values ------------------------------------------------------------------------------
class SpanRole(enum.StrEnum):
    """What a row of the data set is: a logical request, a physical attempt, or a record of
    spans the pipeline knows it lost (written by the exporter, not by the application)."""

    LOGICAL_REQUEST = "logical_request"
    ATTEMPT = "attempt"
    CALL = "call"
    """A client call with physical sends beneath it (an SDK's API call wrapping its retry
    loop, a router call, an HTTP client span wrapping another one's sends): never itself a
    send; its sends are the operation's sends."""
    TELEMETRY_GAP = "telemetry_gap"
    CONTINUATION = "continuation"
    """A logical request continued in another process (see ``retryscope.extract``): same
    logical request id; its attempts belong to that request, it is not a new one."""


class Outcome(enum.StrEnum):
    """Family of an observed attempt outcome."""

    SUCCESS = "success"
    RETRYABLE = "retryable"
    NON_RETRYABLE = "non_retryable"
    INDETERMINATE = "indeterminate"


class OutcomeKind(enum.StrEnum):
    """The ten failure kinds; each belongs to exactly one :class:`Outcome` family."""

    TIMEOUT_BEFORE_RESPONSE = "timeout_before_response"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    REJECTED = "rejected"
    POLICY_DENIED = "policy_denied"
    INVALID_REQUEST = "invalid_request"
    PROTOCOL_VIOLATION = "protocol_violation"
    INVALID_OUTPUT = "invalid_output"
    UNKNOWN_PROVIDER_ACCEPTANCE = "unknown_provider_acceptance"
    STREAM_INTERRUPTED_AFTER_OUTPUT = "stream_interrupted_after_output"

    @property
    def family(self) -> Outcome:
        return KIND_FAMILY[self]


KIND_FAMILY: Final[dict[OutcomeKind, Outcome]] = {
    OutcomeKind.TIMEOUT_BEFORE_RESPONSE: Outcome.RETRYABLE,
    OutcomeKind.RATE_LIMITED: Outcome.RETRYABLE,
    OutcomeKind.UNAVAILABLE: Outcome.RETRYABLE,
    OutcomeKind.REJECTED: Outcome.NON_RETRYABLE,
    OutcomeKind.POLICY_DENIED: Outcome.NON_RETRYABLE,
    OutcomeKind.INVALID_REQUEST: Outcome.NON_RETRYABLE,
    OutcomeKind.PROTOCOL_VIOLATION: Outcome.NON_RETRYABLE,
    OutcomeKind.INVALID_OUTPUT: Outcome.NON_RETRYABLE,
    OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE: Outcome.INDETERMINATE,
    OutcomeKind.STREAM_INTERRUPTED_AFTER_OUTPUT: Outcome.INDETERMINATE,
}


class Layer(enum.StrEnum):
    """Where in the call stack a physical attempt was made, outermost first."""

    WORKFLOW = "workflow"
    QUEUE = "queue"
    HARNESS = "harness"
    ADAPTER = "adapter"
    SDK = "sdk"
    TRANSPORT = "transport"


class RetryOwner(enum.StrEnum):
    """Layers that may be declared the single retry owner of a logical request."""

    HARNESS = "harness"
    ADAPTER = "adapter"
    TRANSPORT_SDK = "transport_sdk"
    WORKFLOW = "workflow"


class Decision(enum.StrEnum):
    """What the retry owner decided after observing an attempt."""

    COMPLETE = "complete"
    RETRY = "retry"
    FALLBACK = "fallback"
    STOP = "stop"


class Terminal(enum.StrEnum):
    """How a logical request ended."""

    COMPLETE = "complete"
    STOP_NON_RETRYABLE = "stop_non_retryable"
    STOP_INDETERMINATE = "stop_indeterminate"
    STOP_ATTEMPT_BUDGET = "stop_attempt_budget"
    STOP_COST_BUDGET = "stop_cost_budget"
    STOP_DEADLINE = "stop_deadline"
    STOP_ROUTE_EXHAUSTED = "stop_route_exhausted"
    STOP_RETRY_BUDGET = "stop_retry_budget"
    """The shared retry budget refused the retry (too many retries in flight)."""
    STOP_CIRCUIT_OPEN = "stop_circuit_open"
    """Every route left was refused by its circuit breaker."""
    STOP_CANCELLED = "stop_cancelled"
    """The caller cancelled the request; an attempt in flight was cancelled with it."""


class DataBoundary(enum.StrEnum):
    """Where data may go, ordered from most to least contained (see :data:`BOUNDARY_RANK`)."""

    LOCAL_PROCESS = "local_process"
    PRIVATE_SERVICE = "private_service"
    EXTERNAL_PROVIDER = "external_provider"


BOUNDARY_RANK: Final[dict[DataBoundary, int]] = {
    DataBoundary.LOCAL_PROCESS: 0,
    DataBoundary.PRIVATE_SERVICE: 1,
    DataBoundary.EXTERNAL_PROVIDER: 2,
}


class BreakerState(enum.StrEnum):
    """A route's circuit-breaker state at dispatch."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class HedgeResult(enum.StrEnum):
    """How a hedged attempt ended: the committed winner, a loser cancelled in flight, or a
    loser whose result arrived after the winner committed (kept as evidence, never used)."""

    WINNER = "winner"
    CANCELLED = "cancelled"
    LATE = "late"


class ReconciliationResult(enum.StrEnum):
    """What reconciling an indeterminate attempt found out."""

    EFFECT_CONFIRMED = "effect_confirmed"
    NO_EFFECT = "no_effect"
    UNKNOWN = "unknown"


class ReconciliationMethod(enum.StrEnum):
    """How the harness reconciled: poll by idempotency key or request id, or read back."""

    IDEMPOTENCY_KEY = "idempotency_key"
    REQUEST_ID = "request_id"
    READBACK = "readback"


class StreamState(enum.StrEnum):
    """How a streamed response ended for the caller."""

    COMPLETED = "completed"
    FAILED_BEFORE_OUTPUT = "failed_before_output"
    INTERRUPTED_AFTER_OUTPUT = "interrupted_after_output"
    ABANDONED = "abandoned"


# --- plain keys (no dedicated column; kept in the generic attributes map) -------------------
HEDGE_OWNER_KEY: Final = "retryscope.hedge.owner"
"""Layer that launched the hedge."""
HEDGE_RESULT_KEY: Final = HEDGE_RESULT.key
"""``winner`` or ``cancelled`` (a cancelled loser still carries the cost it incurred)."""
BREAKER_GENERATION_KEY: Final = "retryscope.breaker.generation"
"""Generation of the breaker (increments on every state change) at dispatch."""
BREAKER_TOKENS_KEY: Final = "retryscope.breaker.tokens"
"""Half-open probe slots the route's breaker had left at dispatch (0 unless half-open)."""
RETRY_BUDGET_STATE_KEY: Final = "retryscope.retry_budget.state"
"""The shared retry budget at this retry's dispatch: ``available`` or ``exhausted``."""
RETRY_BUDGET_GENERATION_KEY: Final = "retryscope.retry_budget.generation"
"""Generation of the retry budget (increments when it turns available or exhausted)."""
RETRY_BUDGET_TOKENS_KEY: Final = "retryscope.retry_budget.tokens"
"""Retries the budget would still have admitted at this retry's dispatch."""
HEDGE_BUDGET_STATE_KEY: Final = "retryscope.hedge_budget.state"
"""The shared hedge budget at this hedge's dispatch: ``available`` or ``exhausted``."""
HEDGE_BUDGET_GENERATION_KEY: Final = "retryscope.hedge_budget.generation"
"""Generation of the hedge budget."""
HEDGE_BUDGET_TOKENS_KEY: Final = "retryscope.hedge_budget.tokens"
"""Hedges the budget would still have admitted at this hedge's dispatch."""
ROUTING_EVENT: Final = "retryscope.routing"
"""Span event on the logical request: one shared guard's verdict on a planned dispatch."""
ROUTING_GUARD_KEY: Final = "retryscope.routing.guard"
"""Which guard decided: ``retry_budget``, ``hedge_budget`` or ``breaker``."""
ROUTING_ATTEMPT_KEY: Final = "retryscope.routing.attempt_ordinal"
"""The attempt ordinal the verdict was for."""
ROUTING_ROUTE_KEY: Final = "retryscope.routing.route_id"
"""The route the verdict was for."""
ROUTING_ADMITTED_KEY: Final = "retryscope.routing.admitted"
"""True when the guard let the dispatch through."""
ROUTING_STATE_KEY: Final = "retryscope.routing.state"
"""The guard's state when it decided."""
ROUTING_GENERATION_KEY: Final = "retryscope.routing.generation"
"""The guard's generation when it decided."""
ROUTING_TOKENS_KEY: Final = "retryscope.routing.tokens"
"""The guard's tokens (dispatches it would still admit) when it decided."""
CANCELLED_KEY: Final = "retryscope.attempt.cancelled"
"""True on an attempt stopped in flight (the caller cancelled, or it lost a hedge race)."""
CAPABILITY_OFFERED_DIGEST_KEY: Final = "retryscope.route.capability_offered_digest"
"""SHA-256 of the capability contract the route offers (the route's capability digest is
the request's contract it was proven to satisfy)."""
JOB_ID_KEY: Final = "retryscope.job.id"
"""Id of the provider job the attempt submitted (submitted once, then polled by id)."""
JOB_POLLS_KEY: Final = "retryscope.job.polls"
"""Polls the attempt made for its provider job."""
RECONCILIATION_POLLS_KEY: Final = "retryscope.reconciliation.polls"
"""Polls a reconciliation attempt made (more than one while the receiver was in progress)."""
RECONCILIATION_POLL_EVENT: Final = "retryscope.reconciliation.poll"
"""Span event on a reconciliation attempt: one poll of the receiver and its answer."""
RECONCILIATION_STATUS_KEY: Final = "retryscope.reconciliation.status"
"""The receiver's answer to one poll: succeeded, failed_no_effect, in_progress, indeterminate."""
STREAM_EVENT_STATE_KEY: Final = "retryscope.stream.commit_state"
"""How the attempt's streamed events ended under the commit protocol: ``committed`` or
``invalidated``."""
OVERLAPPING_KEY: Final = "retryscope.attempt.overlapping"
"""True on a non-hedge attempt that started while a sibling attempt was still open."""
SIBLING_ORDINAL_KEY: Final = "retryscope.attempt.sibling_ordinal"
"""1-based number of this attempt among its layer's attempts under the same parent."""
LOWER_LAYER_KEY: Final = "retryscope.lower.layer"
"""Layer below this attempt whose retry configuration is declared."""
LOWER_TIMEOUT_MS_KEY: Final = "retryscope.lower.timeout_ms"
"""Per-request timeout of the layer below, in ms."""
LOWER_SOURCE_KEY: Final = "retryscope.lower.source"
"""Class of the client the lower-layer configuration was read from."""
PRICE_TABLE_VERSION_KEY: Final = "retryscope.cost.price_table_version"
"""Version label of the price table that priced this attempt."""
COST_ESTIMATE_REASON_KEY: Final = "retryscope.cost.estimate_reason"
"""Why the cost is an estimate: ``usage_unknown`` or ``price_unknown``."""
GEN_AI_CACHED_TOKENS_KEY: Final = "gen_ai.usage.cache_read.input_tokens"
"""OTel GenAI: input tokens served from the provider's cache (part of input tokens)."""
STREAM_STATE_KEY: Final = "retryscope.stream.state"
"""How the stream ended for the caller (:class:`StreamState`)."""
STREAM_BYTES_KEY: Final = "retryscope.stream.bytes"
"""Bytes (or characters, for text chunks) delivered to the caller."""
STREAM_FIRST_EVENT_MS_KEY: Final = "retryscope.stream.first_event_ms"
"""Milliseconds from attempt start to the first delivered event."""
RECONCILIATION_EVENT: Final = "retryscope.reconciliation"
"""Name of the span event recording one reconciliation on the logical request."""
RECONCILIATION_METHOD_KEY: Final = "retryscope.reconciliation.method"
"""How it reconciled (:class:`ReconciliationMethod`)."""
RECONCILIATION_ATTEMPT_KEY: Final = "retryscope.reconciliation.attempt_ordinal"
"""Ordinal of the indeterminate attempt that was reconciled."""
RECONCILIATION_LAYER_KEY: Final = "retryscope.reconciliation.attempt_layer"
"""Layer of the indeterminate attempt that was reconciled."""
CALL_LIBRARY_KEY: Final = "retryscope.call.library"
"""On a call span: the client library whose call it is (e.g. ``anthropic``, ``openai``)."""
CALL_SCOPES: Final[tuple[tuple[str, str], ...]] = (
    ("com.anthropic.sdk.python", "anthropic"),
    ("opentelemetry.instrumentation.openai_v2", "openai"),
    ("opentelemetry.instrumentation.openai", "openai"),
    ("opentelemetry.util.genai", "genai"),
    ("opentelemetry.instrumentation.botocore", "botocore"),
)
"""Instrumentation scope name prefixes of client *call* spans (one per API call, around the
SDK's retry loop), and the library they name: the stamping processor takes them for calls,
the analytics for the calls of an implicit logical request (``rs_call_span``)."""
DEPLOYMENT_ID_KEY: Final = "retryscope.deployment.id"
"""On a send a router dispatched: the router's deployment id (LiteLLM ``model_info.id``)."""
DEPLOYMENT_MODEL_KEY: Final = "retryscope.deployment.model"
"""On a send a router dispatched: the deployment's model."""
DEPLOYMENT_GROUP_KEY: Final = "retryscope.deployment.group"
"""On a send a router dispatched: the model group the caller asked for."""
HTTP_RETRY_AFTER_RAW_KEY: Final = "retryscope.http.retry_after"
"""The Retry-After (or retry-after-ms) header as received, bounded to 64 characters."""
HTTP_RETRY_AFTER_PARSED_MS_KEY: Final = "retryscope.http.retry_after_ms"
"""That header parsed and bounded, in ms (absent when unparseable)."""
URL_FULL_KEY: Final = "url.full"
"""OTel: the request URL, with credentials and secret query values redacted."""
SERVER_ADDRESS_KEY: Final = "server.address"
SERVER_PORT_KEY: Final = "server.port"
RPC_SYSTEM_KEY: Final = "rpc.system"
"""OTel: the RPC system of a client or server RPC span (``grpc``)."""
RPC_SERVICE_KEY: Final = "rpc.service"
RPC_METHOD_KEY: Final = "rpc.method"
RPC_GRPC_STATUS_CODE_KEY: Final = "rpc.grpc.status_code"
"""OTel: the numeric gRPC status code a call ended with (0: OK)."""
WAITED_SO_FAR_MS_KEY: Final = "retryscope.backoff.waited_so_far_ms"
"""Total time the retry library had slept for this call before this attempt."""
CAUSED_BY_KEY: Final = "retryscope.retry.caused_by"
"""``error.type`` of the failure that made the retry library schedule this attempt."""
DIGEST_KEY_ID_KEY: Final = "retryscope.digest.key_id"
"""On a logical request (or continuation) span with digests: id of the deployment key they
are HMAC-SHA-256 under (absent: unkeyed SHA-256, recoverable for guessable keys)."""
CONTAINED_ERRORS_KEY: Final = "retryscope.contained_errors"
"""Entry points (e.g. ``Attempt.set_cost``) whose call on this request or attempt failed
and was contained: the values they were given are missing or neutral here."""
INVALID_KEYS_KEY: Final = "retryscope.invalid_keys"
"""Attribute keys given to retryscope whose values could not be recorded (not an attribute
value, and not convertible to one)."""
TRUNCATED_KEYS_KEY: Final = "retryscope.truncated_keys"
"""Keys whose string values were cut to the configured bound."""
REDACTED: Final = "[redacted]"
"""Value written in place of an attribute an attribute hook redacted."""
