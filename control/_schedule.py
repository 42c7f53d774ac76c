"""The deterministic retry schedule: capped exponential backoff, bounded hints, fallback.

Rules (integers in ms, see docs/guides/control-plane.md):

* after the n-th failed attempt on a route, ``delay_n = min(base × 2^(n−1), maximum)``;
* the server hint is bounded, ``hint = min(retry_after, max_retry_after)``, and
  ``delay = max(delay_n, hint)``;
* when the route's attempts are exhausted (or its breaker rejects it), the next-priority
  route with attempts left continues at its next route ordinal and waits
  ``max(base, hint)`` after the previous attempt;
* ``not_before = completed_at + delay``;
* hedge ``k`` of the first attempt may start at ``first_start + k × hedge delay``;
* polls (a reconciliation in progress, a provider job) are ``max(interval, hint)`` apart,
  at most ``max_polls`` of them, none at or after the deadline.

With jitter configured the delay is drawn (full jitter) from ``[hint, delay]`` by a
counter-mode SHA-256 generator keyed by the scheduler release, the seed, the idempotency
digest and the attempt ordinal: the same inputs give the same draw on every machine, so a
replay can recompute and check it. Jitter never goes below the server's hint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from retryscope.canonical import canonical_json
from retryscope.control._policy import (
    Admission,
    FallbackRoute,
    Jitter,
    PollPolicy,
    RetryPolicy,
)
from retryscope.control._strict import INT64_MAX
from retryscope.vocabulary import Decision

_JITTER_DOMAIN = b"retryscope/full-jitter/v1\x00"


class ArithmeticOverflow(ValueError):
    """A checked sum left the int64 range; ``field`` names what was being computed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def checked_add(a: int, b: int, field: str) -> int:
    """``a + b`` for non-negative int64 values, or :class:`ArithmeticOverflow`."""
    total = a + b
    if total > INT64_MAX:
        raise ArithmeticOverflow(field, f"{a} + {b} overflows int64")
    return total


def exponential_delay_ms(base_ms: int, max_ms: int, failed_route_attempt: int) -> int:
    """``min(base × 2^(n−1), maximum)`` for the n-th failed attempt on a route (n ≥ 1)."""
    if failed_route_attempt < 1:
        raise ValueError(f"route attempt ordinal must be >= 1, got {failed_route_attempt}")
    shift = failed_route_attempt - 1
    if base_ms == 0:
        return 0
    if shift >= max_ms.bit_length():  # base << shift > max_ms already: no huge ints
        return max_ms
    return min(base_ms << shift, max_ms)


def bounded_hint_ms(retry_after_ms: int | None, cap_ms: int) -> int:
    """The Retry-After hint the policy honours (0 when there was none)."""
    return 0 if retry_after_ms is None else min(retry_after_ms, cap_ms)


def retry_delay_ms(
    policy: RetryPolicy, failed_route_attempt: int, retry_after_ms: int | None
) -> int:
    """Same-route delay: ``max(min(base × 2^(n−1), maximum), min(retry_after, cap))``."""
    return max(
        exponential_delay_ms(policy.base_backoff_ms, policy.max_backoff_ms, failed_route_attempt),
        bounded_hint_ms(retry_after_ms, policy.max_retry_after_ms),
    )


def fallback_delay_ms(policy: RetryPolicy, retry_after_ms: int | None) -> int:
    """First attempt on the next route: ``max(base, min(retry_after, cap))``."""
    return max(policy.base_backoff_ms, bounded_hint_ms(retry_after_ms, policy.max_retry_after_ms))


def jitter_draw(
    jitter: Jitter, *, idempotency_sha256: str, attempt_ordinal: int, low: int, high: int
) -> int:
    """Full-jitter sample in ``[low, high]``, a pure function of its inputs."""
    if low > high:
        raise ValueError(f"empty jitter window [{low}, {high}]")
    key = canonical_json(
        [jitter.scheduler_release, jitter.seed, idempotency_sha256, attempt_ordinal],
        integers_only=True,
    )
    value = int.from_bytes(hashlib.sha256(_JITTER_DOMAIN + key).digest()[:16], "big")
    return low + value % (high - low + 1)


@dataclass(frozen=True, slots=True)
class PlannedAttempt:
    """The attempt the policy allows next, reserving ``reserve_micros`` (the route's worst
    case). ``delay_low_ms``/``delay_high_ms`` is the allowed window of the backoff before
    it (equal without jitter) and ``delay_ms`` the scheduled value; all three, like
    ``not_before_ms``, are None for an attempt without backoff (a first attempt)."""

    route: FallbackRoute
    attempt_ordinal: int
    route_attempt_ordinal: int
    reserve_micros: int
    decision: Decision | None = None
    retry_after_ms: int | None = None
    delay_low_ms: int | None = None
    delay_high_ms: int | None = None
    delay_ms: int | None = None
    not_before_ms: int | None = None
    hedge_ordinal: int | None = None


def next_route(
    policy: RetryPolicy, after: FallbackRoute, used: Mapping[str, int]
) -> FallbackRoute | None:
    """The first route of lower priority than ``after`` with attempts left."""
    for route in policy.route_by_priority():
        if route.priority > after.priority and used.get(route.route_id, 0) < route.max_attempts:
            return route
    return None


def next_step(
    policy: RetryPolicy,
    admission: Admission,
    *,
    failed_route: FallbackRoute,
    used: Mapping[str, int],
    next_attempt_ordinal: int,
    completed_at_ms: int,
    retry_after_ms: int | None,
    skip_failed_route: bool = False,
) -> PlannedAttempt | None:
    """Where and when to try next after a retryable failure on ``failed_route``, or None
    when no route is left (route exhaustion). ``used`` counts attempts per route so far;
    ``skip_failed_route`` moves on even if it has attempts left (its breaker rejected it).
    """
    hint = bounded_hint_ms(retry_after_ms, policy.max_retry_after_ms)
    recorded_hint = None if retry_after_ms is None else hint
    failed_on_route = used.get(failed_route.route_id, 0)
    if not skip_failed_route and failed_on_route < failed_route.max_attempts:
        route, decision = failed_route, Decision.RETRY
        high = retry_delay_ms(policy, failed_on_route, retry_after_ms)
    else:
        later = next_route(policy, failed_route, used)
        if later is None:
            return None
        route, decision = later, Decision.FALLBACK
        high = fallback_delay_ms(policy, retry_after_ms)
    if policy.jitter is None:
        low, delay = high, high
    else:
        low = hint
        delay = jitter_draw(
            policy.jitter,
            idempotency_sha256=admission.idempotency_key_sha256,
            attempt_ordinal=next_attempt_ordinal,
            low=low,
            high=high,
        )
    return PlannedAttempt(
        route=route,
        attempt_ordinal=next_attempt_ordinal,
        route_attempt_ordinal=used.get(route.route_id, 0) + 1,
        reserve_micros=route.max_attempt_cost_micros,
        decision=decision,
        retry_after_ms=recorded_hint,
        delay_low_ms=low,
        delay_high_ms=high,
        delay_ms=delay,
        not_before_ms=checked_add(completed_at_ms, delay, "not_before_ms"),
    )


def hedge_step(
    policy: RetryPolicy,
    admission: Admission,
    *,
    first_start_ms: int,
    group_reserved_micros: int,
    hedges_so_far: int,
) -> PlannedAttempt | None:
    """The next hedge of the first attempt (no backoff, no earlier than its latency
    threshold), or None when the policy allows no more.

    A hedge counts against every budget the attempt it races does: the total attempts, the
    hedge route's attempts, and the cost budget (the reservations of every attempt of the
    group plus its own must fit); it never starts at or after the deadline.
    """
    h = policy.hedging
    if h is None or hedges_so_far >= h.max_hedges:
        return None
    route = policy.route(h.route_id)
    k = hedges_so_far + 1
    if 1 + k > policy.max_total_attempts or k > route.max_attempts:
        return None
    reserved = checked_add(group_reserved_micros, route.max_attempt_cost_micros, "reserved")
    if reserved > policy.max_total_cost_micros:
        return None
    not_before = checked_add(first_start_ms, k * h.delay_ms, "hedge not_before_ms")
    if not_before >= admission.deadline_ms:
        return None
    return PlannedAttempt(
        route=route,
        attempt_ordinal=1 + k,
        route_attempt_ordinal=k,
        reserve_micros=route.max_attempt_cost_micros,
        not_before_ms=not_before,
        hedge_ordinal=k,
    )


def next_poll_ms(
    polling: PollPolicy,
    *,
    polls_done: int,
    last_poll_ms: int,
    deadline_ms: int,
    retry_after_ms: int | None,
    max_retry_after_ms: int,
) -> int | None:
    """When the next poll may run, or None when the polling bounds are spent: at most
    ``max_polls``, ``max(interval, bounded hint)`` after the last one, before the deadline."""
    if polls_done >= polling.max_polls:
        return None
    wait = max(polling.interval_ms, bounded_hint_ms(retry_after_ms, max_retry_after_ms))
    at = checked_add(last_poll_ms, wait, "poll at")
    return None if at >= deadline_ms else at
