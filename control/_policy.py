"""The retry/fallback policy: frozen values, validated once, bound per request at admission.

A :class:`RetryPolicy` is reusable: one retry owner, budgets, a schedule, the shared
protections (retry budget, circuit breaker, hedging), the polling bounds and an ordered
list of prevalidated :class:`FallbackRoute` s. :func:`validate_policy` proves every route
compatible *before the first dispatch* — the structured capability contract field by field
(:mod:`._capability`), behavior class, data boundary, freshness, idempotency, finite
attempts — and each failure is its own :class:`PolicyError` subclass naming the field, so a
caller (or the lab) can tell contract drift from boundary drift without parsing messages.

A request binds its payload digest, idempotency digest and absolute deadline at admission:
an :class:`Admission`. :func:`validate_admission` checks what depends on the request — each
route's behavior evidence must still be valid at the request's deadline. One policy serves
any number of admissions; its digest is the same for all of them.

Times are integer milliseconds since the Unix epoch, money integer micro-units; nothing
here is a float. :func:`policy_from_json` / :func:`policy_from_toml` decode strictly and
validate; :func:`policy_to_obj` gives the JSON object whose canonical form is digested.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final

from retryscope.control._capability import (
    OUTPUT_CONTRACT_FIELDS,
    RESIDENCY_FIELDS,
    CapabilityContract,
    CapabilityGap,
    capability_gaps,
)
from retryscope.control._strict import (
    UINT32_MAX,
    Count,
    InvalidValue,
    from_obj,
    load_json,
    load_toml,
    to_obj,
)
from retryscope.vocabulary import BOUNDARY_RANK, DataBoundary, RetryOwner

_SHA256 = re.compile(r"[0-9a-f]{64}")
DEFAULT_ACCEPTED_OWNERS: Final = frozenset({RetryOwner.HARNESS})
BREAKER_BUCKETS: Final = 10
"""The breaker's sampling window is kept as this many equal buckets."""


@dataclass(frozen=True, slots=True)
class BehaviorEvidence:
    """The evaluation that admitted a route's release for the behavior class, and until when.

    ``evaluation_sha256`` names the evaluation release (held-out and safety gates) that
    passed; the evidence is valid for dispatches strictly before ``expires_at_ms``.
    """

    evaluation_sha256: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class FallbackRoute:
    """One prevalidated route; ``priority`` 0 is the primary.

    ``capability`` is what the route offers; ``max_attempt_cost_micros`` is the worst-case
    cost of one attempt, reserved against the cost budget before each dispatch;
    ``staleness_ms`` the worst-case age of the data it answers from (0: live).
    """

    route_id: str
    route_release_sha256: str
    capability: CapabilityContract
    behavior_class_sha256: str
    behavior_evidence: BehaviorEvidence
    data_boundary: DataBoundary
    priority: Count
    max_attempts: Count
    supports_idempotency: bool
    max_attempt_cost_micros: int
    staleness_ms: int = 0


@dataclass(frozen=True, slots=True)
class Jitter:
    """Replayable full jitter: draws are a pure function of release, seed and attempt."""

    scheduler_release: str
    seed: int


@dataclass(frozen=True, slots=True)
class RetryBudgetPolicy:
    """Envoy's retry budget: concurrent retries stay within ``budget_percent`` of the
    requests in flight, but ``min_retry_concurrency`` retries are always allowed."""

    budget_percent: int
    min_retry_concurrency: int


@dataclass(frozen=True, slots=True)
class CircuitBreakerPolicy:
    """Per-route breaker (Polly v8's names): it opens when, within ``sampling_duration_ms``,
    at least ``minimum_throughput`` outcomes were seen and ``failure_percent`` % or more of
    them failed; after ``break_duration_ms`` it lets ``half_open_probes`` probes through."""

    failure_percent: int
    minimum_throughput: int
    sampling_duration_ms: int
    break_duration_ms: int
    half_open_probes: int


@dataclass(frozen=True, slots=True)
class HedgePolicy:
    """Hedge the request's first attempt on ``route_id`` when it has not answered after
    ``delay_ms`` (then every ``delay_ms``), at most ``max_hedges`` times. Hedges in flight
    stay within ``budget_percent`` of the requests in flight, at least
    ``min_hedge_concurrency``."""

    route_id: str
    delay_ms: int
    max_hedges: int
    budget_percent: int
    min_hedge_concurrency: int


@dataclass(frozen=True, slots=True)
class PollPolicy:
    """Bounds of polling (an in-progress reconciliation, a provider job): at most
    ``max_polls`` polls, ``interval_ms`` apart (or the receiver's bounded hint, if longer),
    none at or after the deadline."""

    interval_ms: int
    max_polls: int


DEFAULT_POLLING: Final = PollPolicy(interval_ms=1_000, max_polls=10)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Everything the evaluator needs to decide, for any number of requests."""

    retry_owner: RetryOwner
    capability: CapabilityContract
    behavior_class_sha256: str
    max_data_boundary: DataBoundary
    base_backoff_ms: int
    max_backoff_ms: int
    max_retry_after_ms: int
    max_total_attempts: Count
    max_total_cost_micros: int
    routes: tuple[FallbackRoute, ...]
    freshness_bound_ms: int | None = None
    jitter: Jitter | None = None
    retry_budget: RetryBudgetPolicy | None = None
    circuit_breaker: CircuitBreakerPolicy | None = None
    hedging: HedgePolicy | None = None
    polling: PollPolicy = field(default=DEFAULT_POLLING)

    def route_by_priority(self) -> tuple[FallbackRoute, ...]:
        """Routes in dispatch order (priority 0 first)."""
        return tuple(sorted(self.routes, key=lambda r: r.priority))

    def route(self, route_id: str) -> FallbackRoute:
        return next(r for r in self.routes if r.route_id == route_id)


@dataclass(frozen=True, slots=True)
class Admission:
    """One logical request bound to a policy: its digests and its absolute deadline."""

    logical_request_sha256: str
    idempotency_key_sha256: str
    deadline_ms: int


# --- validation errors -----------------------------------------------------------------------
class PolicyError(ValueError):
    """A policy that must not run; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class OwnerNotAccepted(PolicyError):
    """The declared retry owner is not one this controller accepts (opaque ownership)."""


class NoRoutes(PolicyError):
    """A policy without routes can dispatch nothing."""


class PriorityGap(PolicyError):
    """Route priorities are not exactly 0..n-1."""


class DuplicateRouteId(PolicyError):
    """Two routes share an id."""


class DuplicateRouteRelease(PolicyError):
    """Two routes share a release digest."""


class CapabilityMismatch(PolicyError):
    """A route falls short of the request's capability contract (``gaps``: every field)."""

    def __init__(self, field: str, message: str, gaps: tuple[CapabilityGap, ...] = ()) -> None:
        super().__init__(field, message)
        self.gaps = gaps


class ResidencyViolation(CapabilityMismatch):
    """A route may process or retain data outside what the request allows."""


class OutputContractMismatch(CapabilityMismatch):
    """A route cannot produce output under the request's output contract."""


class BehaviorMismatch(PolicyError):
    """A route's behavior class differs from the required one."""


class BoundaryExceeded(PolicyError):
    """A route would send data past the policy's maximum data boundary."""


class FreshnessExceeded(PolicyError):
    """A route answers from data older than the policy's freshness bound."""


class EvidenceExpired(PolicyError):
    """A route's behavior evidence expires before the request's deadline."""


class IdempotencyUnsupported(PolicyError):
    """A route cannot honour the idempotency key."""


class InvalidAttemptLimit(PolicyError):
    """Per-route or total attempts are not a finite number >= 1."""


class InvalidBackoff(PolicyError):
    """The base backoff exceeds the maximum backoff."""


class InvalidDigest(PolicyError):
    """A digest field is not 64 lowercase hex characters."""


class InvalidProtection(PolicyError):
    """A retry budget, breaker, hedging or polling setting outside its range."""


def _digest(value: str, field: str) -> None:
    if not _SHA256.fullmatch(value):
        raise InvalidDigest(field, f"expected 64 lowercase hex characters, got {value!r}")


def _range(value: int, low: int, high: int, field: str) -> None:
    if not low <= value <= high:
        raise InvalidProtection(field, f"must be {low}..{high}, got {value}")


def _capability_error(at: str, route: FallbackRoute, gaps: tuple[CapabilityGap, ...]) -> None:
    first = gaps[0]
    if first.field in RESIDENCY_FIELDS:
        cls: type[CapabilityMismatch] = ResidencyViolation
    elif first.field in OUTPUT_CONTRACT_FIELDS:
        cls = OutputContractMismatch
    else:
        cls = CapabilityMismatch
    detail = "; ".join(f"{g.field} {g.message}" for g in gaps)
    raise cls(f"{at}.capability.{first.field}", f"route {route.route_id!r}: {detail}", gaps)


def _validate_protections(policy: RetryPolicy) -> None:
    if policy.jitter is not None and not policy.jitter.scheduler_release:
        raise InvalidValue("jitter.scheduler_release", "must not be empty")
    if (b := policy.retry_budget) is not None:
        _range(b.budget_percent, 0, 100, "retry_budget.budget_percent")
        _range(b.min_retry_concurrency, 0, UINT32_MAX, "retry_budget.min_retry_concurrency")
    if (c := policy.circuit_breaker) is not None:
        _range(c.failure_percent, 1, 100, "circuit_breaker.failure_percent")
        _range(c.minimum_throughput, 1, UINT32_MAX, "circuit_breaker.minimum_throughput")
        _range(
            c.sampling_duration_ms, BREAKER_BUCKETS, 2**62, "circuit_breaker.sampling_duration_ms"
        )
        _range(c.break_duration_ms, 1, 2**62, "circuit_breaker.break_duration_ms")
        _range(c.half_open_probes, 1, UINT32_MAX, "circuit_breaker.half_open_probes")
    if (h := policy.hedging) is not None:
        ids = {r.route_id: r for r in policy.routes}
        if h.route_id not in ids:
            raise InvalidProtection("hedging.route_id", f"{h.route_id!r} is not a route")
        if ids[h.route_id].priority == 0:
            raise InvalidProtection(
                "hedging.route_id", "a hedge needs independent capacity: not the primary route"
            )
        _range(h.delay_ms, 1, 2**62, "hedging.delay_ms")
        _range(h.max_hedges, 1, ids[h.route_id].max_attempts, "hedging.max_hedges")
        _range(h.budget_percent, 0, 100, "hedging.budget_percent")
        _range(h.min_hedge_concurrency, 0, UINT32_MAX, "hedging.min_hedge_concurrency")
    _range(policy.polling.interval_ms, 1, 2**62, "polling.interval_ms")
    _range(policy.polling.max_polls, 1, UINT32_MAX, "polling.max_polls")


def validate_policy(
    policy: RetryPolicy, *, accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS
) -> RetryPolicy:
    """Check ``policy`` before the first dispatch; return it unchanged or raise."""
    if policy.retry_owner not in accepted_owners:
        accepted = ", ".join(sorted(o.value for o in accepted_owners))
        raise OwnerNotAccepted(
            "retry_owner", f"{policy.retry_owner.value!r} is not accepted (accepted: {accepted})"
        )
    _digest(policy.behavior_class_sha256, "behavior_class_sha256")
    if (schema := policy.capability.output_schema_sha256) is not None:
        _digest(schema, "capability.output_schema_sha256")
    if policy.base_backoff_ms > policy.max_backoff_ms:
        raise InvalidBackoff(
            "base_backoff_ms",
            f"{policy.base_backoff_ms} exceeds max_backoff_ms {policy.max_backoff_ms}",
        )
    if not 1 <= policy.max_total_attempts <= UINT32_MAX:
        raise InvalidAttemptLimit(
            "max_total_attempts", f"must be 1..{UINT32_MAX}, got {policy.max_total_attempts}"
        )
    if not policy.routes:
        raise NoRoutes("routes", "at least one route is required")
    priorities = sorted(r.priority for r in policy.routes)
    if priorities != list(range(len(policy.routes))):
        raise PriorityGap("routes.priority", f"must be 0..{len(policy.routes) - 1}: {priorities}")
    ids: set[str] = set()
    releases: set[str] = set()
    limit = BOUNDARY_RANK[policy.max_data_boundary]
    for i, route in enumerate(policy.routes):
        at = f"routes[{i}]"
        if route.route_id in ids or not route.route_id:
            raise DuplicateRouteId(f"{at}.route_id", f"{route.route_id!r} is empty or repeated")
        ids.add(route.route_id)
        _digest(route.route_release_sha256, f"{at}.route_release_sha256")
        if route.route_release_sha256 in releases:
            raise DuplicateRouteRelease(
                f"{at}.route_release_sha256", f"{route.route_release_sha256} is repeated"
            )
        releases.add(route.route_release_sha256)
        if gaps := capability_gaps(policy.capability, route.capability):
            _capability_error(at, route, gaps)
        if route.behavior_class_sha256 != policy.behavior_class_sha256:
            raise BehaviorMismatch(
                f"{at}.behavior_class_sha256",
                f"route {route.route_id!r} binds a different behavior class",
            )
        _digest(
            route.behavior_evidence.evaluation_sha256, f"{at}.behavior_evidence.evaluation_sha256"
        )
        if BOUNDARY_RANK[route.data_boundary] > limit:
            raise BoundaryExceeded(
                f"{at}.data_boundary",
                f"route {route.route_id!r} is {route.data_boundary.value}, policy maximum is "
                f"{policy.max_data_boundary.value}",
            )
        bound = policy.freshness_bound_ms
        if bound is not None and route.staleness_ms > bound:
            raise FreshnessExceeded(
                f"{at}.staleness_ms",
                f"route {route.route_id!r} answers from data up to {route.staleness_ms} ms old, "
                f"the bound is {bound} ms",
            )
        if not route.supports_idempotency:
            raise IdempotencyUnsupported(
                f"{at}.supports_idempotency", f"route {route.route_id!r} cannot honour the key"
            )
        if not 1 <= route.max_attempts <= UINT32_MAX:
            raise InvalidAttemptLimit(
                f"{at}.max_attempts", f"must be 1..{UINT32_MAX}, got {route.max_attempts}"
            )
    _validate_protections(policy)
    return policy


def validate_admission(policy: RetryPolicy, admission: Admission) -> Admission:
    """Check what depends on the request: its digests, and that every route's behavior
    evidence still holds for a dispatch just before the deadline. Return it or raise."""
    _digest(admission.logical_request_sha256, "admission.logical_request_sha256")
    _digest(admission.idempotency_key_sha256, "admission.idempotency_key_sha256")
    for i, route in enumerate(policy.routes):
        expires = route.behavior_evidence.expires_at_ms
        if expires < admission.deadline_ms:
            raise EvidenceExpired(
                f"routes[{i}].behavior_evidence.expires_at_ms",
                f"route {route.route_id!r}'s evidence expires at {expires} ms, before the "
                f"deadline {admission.deadline_ms} ms",
            )
    return admission


# --- encoding and strict decoding ------------------------------------------------------------
def policy_to_obj(policy: RetryPolicy) -> dict[str, Any]:
    """The policy as a JSON object (integers only), the input of its canonical digest."""
    obj: dict[str, Any] = to_obj(policy)
    return obj


def policy_from_obj(
    raw: Any,
    *,
    validate: bool = True,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> RetryPolicy:
    """Decode a parsed JSON/TOML object strictly; validate unless ``validate=False``.

    ``retry_owner`` is a single string: a list (two declared owners) is a type error, and
    ``adapter``/``transport_sdk``/``workflow`` decode as themselves so validation can
    reject them by name. Optional sections (``jitter``, ``retry_budget``,
    ``circuit_breaker``, ``hedging``, ``polling``, ``freshness_bound_ms``) may be absent.
    """
    policy = from_obj(RetryPolicy, raw, "")
    return validate_policy(policy, accepted_owners=accepted_owners) if validate else policy


def policy_from_json(
    text: str | bytes,
    *,
    validate: bool = True,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> RetryPolicy:
    """Strictly decode a JSON policy; validate unless ``validate=False``."""
    return policy_from_obj(load_json(text), validate=validate, accepted_owners=accepted_owners)


def policy_from_toml(
    text: str,
    *,
    validate: bool = True,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> RetryPolicy:
    """Strictly decode a TOML policy (routes as ``[[routes]]`` tables); validate unless
    ``validate=False``."""
    return policy_from_obj(load_toml(text), validate=validate, accepted_owners=accepted_owners)
