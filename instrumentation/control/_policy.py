"""The retry/fallback policy: frozen values, validation before dispatch, strict decoding.

A :class:`RetryPolicy` binds one logical request (its payload digest and idempotency
digest) to one retry owner, a set of budgets and an ordered list of prevalidated
:class:`FallbackRoute` s. :func:`validate_policy` proves every route compatible *before the
first dispatch* (capability, behavior class, data boundary, idempotency, finite attempts);
each failure is its own :class:`PolicyError` subclass naming the field, so a caller (or
the lab) can tell contract drift from boundary drift without parsing messages.

Times are integer milliseconds since the Unix epoch, money integer micro-units; nothing
here is a float. :func:`policy_from_json` / :func:`policy_from_toml` decode strictly and
validate; :func:`policy_to_obj` gives the JSON object whose canonical form is digested.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from retryscope.instrumentation.control._strict import (
    UINT32_MAX,
    DecodeError,
    Fields,
    InvalidValue,
    load_json,
    load_toml,
)
from retryscope.vocabulary import BOUNDARY_RANK, DataBoundary, RetryOwner

_SHA256 = re.compile(r"[0-9a-f]{64}")
DEFAULT_ACCEPTED_OWNERS: Final = frozenset({RetryOwner.HARNESS})


@dataclass(frozen=True, slots=True)
class FallbackRoute:
    """One prevalidated route; ``priority`` 0 is the primary.

    ``max_attempt_cost_micros`` is the worst-case cost of one attempt on this route: the
    amount reserved against the cost budget before each dispatch.
    """

    route_id: str
    route_release_sha256: str
    capability_contract_sha256: str
    behavior_class_sha256: str
    data_boundary: DataBoundary
    priority: int
    max_attempts: int
    supports_idempotency: bool
    max_attempt_cost_micros: int


@dataclass(frozen=True, slots=True)
class Jitter:
    """Replayable full jitter: draws are a pure function of release, seed and attempt."""

    scheduler_release: str
    seed: int


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Everything the evaluator needs to decide; see the module docstring for units."""

    retry_owner: RetryOwner
    logical_request_sha256: str
    idempotency_key_sha256: str
    capability_contract_sha256: str
    behavior_class_sha256: str
    max_data_boundary: DataBoundary
    base_backoff_ms: int
    max_backoff_ms: int
    max_retry_after_ms: int
    max_total_attempts: int
    max_total_cost_micros: int
    deadline_ms: int
    routes: tuple[FallbackRoute, ...]
    jitter: Jitter | None = None

    def route_by_priority(self) -> tuple[FallbackRoute, ...]:
        """Routes in dispatch order (priority 0 first)."""
        return tuple(sorted(self.routes, key=lambda r: r.priority))


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
    """A route's capability contract differs from the request's (contract drift)."""


class BehaviorMismatch(PolicyError):
    """A route's behavior class differs from the required one."""


class BoundaryExceeded(PolicyError):
    """A route would send data past the policy's maximum data boundary."""


class IdempotencyUnsupported(PolicyError):
    """A route cannot honour the idempotency key."""


class InvalidAttemptLimit(PolicyError):
    """Per-route or total attempts are not a finite number >= 1."""


class InvalidBackoff(PolicyError):
    """The base backoff exceeds the maximum backoff."""


class InvalidDigest(PolicyError):
    """A digest field is not 64 lowercase hex characters."""


def _digest(value: str, field: str) -> None:
    if not _SHA256.fullmatch(value):
        raise InvalidDigest(field, f"expected 64 lowercase hex characters, got {value!r}")


def validate_policy(
    policy: RetryPolicy, *, accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS
) -> RetryPolicy:
    """Check ``policy`` before the first dispatch; return it unchanged or raise."""
    if policy.retry_owner not in accepted_owners:
        accepted = ", ".join(sorted(o.value for o in accepted_owners))
        raise OwnerNotAccepted(
            "retry_owner", f"{policy.retry_owner.value!r} is not accepted (accepted: {accepted})"
        )
    for name in (
        "logical_request_sha256",
        "idempotency_key_sha256",
        "capability_contract_sha256",
        "behavior_class_sha256",
    ):
        _digest(getattr(policy, name), name)
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
        if route.capability_contract_sha256 != policy.capability_contract_sha256:
            raise CapabilityMismatch(
                f"{at}.capability_contract_sha256",
                f"route {route.route_id!r} binds a different capability contract",
            )
        if route.behavior_class_sha256 != policy.behavior_class_sha256:
            raise BehaviorMismatch(
                f"{at}.behavior_class_sha256",
                f"route {route.route_id!r} binds a different behavior class",
            )
        if BOUNDARY_RANK[route.data_boundary] > limit:
            raise BoundaryExceeded(
                f"{at}.data_boundary",
                f"route {route.route_id!r} is {route.data_boundary.value}, policy maximum is "
                f"{policy.max_data_boundary.value}",
            )
        if not route.supports_idempotency:
            raise IdempotencyUnsupported(
                f"{at}.supports_idempotency", f"route {route.route_id!r} cannot honour the key"
            )
        if not 1 <= route.max_attempts <= UINT32_MAX:
            raise InvalidAttemptLimit(
                f"{at}.max_attempts", f"must be 1..{UINT32_MAX}, got {route.max_attempts}"
            )
    return policy


# --- encoding and strict decoding ------------------------------------------------------------
def route_to_obj(route: FallbackRoute) -> dict[str, Any]:
    return {
        "route_id": route.route_id,
        "route_release_sha256": route.route_release_sha256,
        "capability_contract_sha256": route.capability_contract_sha256,
        "behavior_class_sha256": route.behavior_class_sha256,
        "data_boundary": route.data_boundary.value,
        "priority": route.priority,
        "max_attempts": route.max_attempts,
        "supports_idempotency": route.supports_idempotency,
        "max_attempt_cost_micros": route.max_attempt_cost_micros,
    }


def policy_to_obj(policy: RetryPolicy) -> dict[str, Any]:
    """The policy as a JSON object (integers only), the input of its canonical digest."""
    obj: dict[str, Any] = {
        "retry_owner": policy.retry_owner.value,
        "logical_request_sha256": policy.logical_request_sha256,
        "idempotency_key_sha256": policy.idempotency_key_sha256,
        "capability_contract_sha256": policy.capability_contract_sha256,
        "behavior_class_sha256": policy.behavior_class_sha256,
        "max_data_boundary": policy.max_data_boundary.value,
        "base_backoff_ms": policy.base_backoff_ms,
        "max_backoff_ms": policy.max_backoff_ms,
        "max_retry_after_ms": policy.max_retry_after_ms,
        "max_total_attempts": policy.max_total_attempts,
        "max_total_cost_micros": policy.max_total_cost_micros,
        "deadline_ms": policy.deadline_ms,
        "routes": [route_to_obj(r) for r in policy.routes],
    }
    if policy.jitter is not None:
        obj["jitter"] = {
            "scheduler_release": policy.jitter.scheduler_release,
            "seed": policy.jitter.seed,
        }
    return obj


def _route_from_obj(raw: Any, path: str) -> FallbackRoute:
    f = Fields(raw, path)
    route = FallbackRoute(
        route_id=f.string("route_id"),
        route_release_sha256=f.string("route_release_sha256"),
        capability_contract_sha256=f.string("capability_contract_sha256"),
        behavior_class_sha256=f.string("behavior_class_sha256"),
        data_boundary=f.enum("data_boundary", DataBoundary),
        priority=f.integer("priority", maximum=UINT32_MAX),
        max_attempts=f.integer("max_attempts", maximum=UINT32_MAX),
        supports_idempotency=f.boolean("supports_idempotency"),
        max_attempt_cost_micros=f.integer("max_attempt_cost_micros"),
    )
    f.done()
    return route


def policy_from_obj(
    raw: Any,
    *,
    validate: bool = True,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> RetryPolicy:
    """Decode a parsed JSON/TOML object strictly; validate unless ``validate=False``.

    ``retry_owner`` is a single string: a list (two declared owners) is a type error, and
    ``adapter``/``transport_sdk``/``workflow`` decode as themselves so validation can
    reject them by name.
    """
    f = Fields(raw, "")
    routes_raw = f.array("routes")
    jitter_raw = f.raw("jitter", required=False)
    jitter = None
    if jitter_raw is not None:
        j = Fields(jitter_raw, "jitter")
        jitter = Jitter(scheduler_release=j.string("scheduler_release"), seed=j.integer("seed"))
        j.done()
        if not jitter.scheduler_release:
            raise InvalidValue("jitter.scheduler_release", "must not be empty")
    policy = RetryPolicy(
        retry_owner=f.enum("retry_owner", RetryOwner),
        logical_request_sha256=f.string("logical_request_sha256"),
        idempotency_key_sha256=f.string("idempotency_key_sha256"),
        capability_contract_sha256=f.string("capability_contract_sha256"),
        behavior_class_sha256=f.string("behavior_class_sha256"),
        max_data_boundary=f.enum("max_data_boundary", DataBoundary),
        base_backoff_ms=f.integer("base_backoff_ms"),
        max_backoff_ms=f.integer("max_backoff_ms"),
        max_retry_after_ms=f.integer("max_retry_after_ms"),
        max_total_attempts=f.integer("max_total_attempts", maximum=UINT32_MAX),
        max_total_cost_micros=f.integer("max_total_cost_micros"),
        deadline_ms=f.integer("deadline_ms"),
        routes=tuple(_route_from_obj(r, f"routes[{i}]") for i, r in enumerate(routes_raw)),
        jitter=jitter,
    )
    f.done()
    return validate_policy(policy, accepted_owners=accepted_owners) if validate else policy


def policy_from_json(
    text: str | bytes, *, accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS
) -> RetryPolicy:
    """Strictly decode and validate a JSON policy."""
    return policy_from_obj(load_json(text), accepted_owners=accepted_owners)


def policy_from_toml(
    text: str, *, accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS
) -> RetryPolicy:
    """Strictly decode and validate a TOML policy (routes as ``[[routes]]`` tables)."""
    return policy_from_obj(load_toml(text), accepted_owners=accepted_owners)


__all__ = [
    "BehaviorMismatch",
    "BoundaryExceeded",
    "CapabilityMismatch",
    "DecodeError",
    "DuplicateRouteId",
    "DuplicateRouteRelease",
    "FallbackRoute",
    "IdempotencyUnsupported",
    "InvalidAttemptLimit",
    "InvalidBackoff",
    "InvalidDigest",
    "Jitter",
    "NoRoutes",
    "OwnerNotAccepted",
    "PolicyError",
    "PriorityGap",
    "RetryPolicy",
    "policy_from_json",
    "policy_from_obj",
    "policy_from_toml",
    "policy_to_obj",
    "validate_policy",
]
