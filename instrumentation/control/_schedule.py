"""The deterministic retry schedule: capped exponential backoff, bounded hints, fallback.

Rules (integers in ms, see the README's "Control plane and lab"):

* after the n-th failed attempt on a route, ``delay_n = min(base × 2^(n−1), maximum)``;
* the server hint is bounded, ``hint = min(retry_after, max_retry_after)``, and
  ``delay = max(delay_n, hint)``;
* when the route's attempts are exhausted, the next-priority route starts at route ordinal
  1 and waits ``max(base, hint)`` after the previous route's last attempt;
* ``not_before = completed_at + delay``.

With jitter configured the delay is drawn (full jitter) from ``[hint, delay]`` by a
counter-mode SHA-256 generator keyed by the scheduler release, the seed, the idempotency
digest and the attempt ordinal: the same inputs give the same draw on every machine, so a
replay can recompute and check it. Jitter never goes below the server's hint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from retryscope.instrumentation._digests import canonical_json
from retryscope.instrumentation.control._policy import FallbackRoute, Jitter, RetryPolicy
from retryscope.instrumentation.control._strict import INT64_MAX
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
class Step:
    """The next planned attempt after a retryable failure.

    ``delay_low``/``delay_high`` is the allowed window (equal without jitter); ``delay_ms``
    is the scheduled value (the seeded draw with jitter).
    """

    decision: Decision
    route: FallbackRoute
    route_attempt_ordinal: int
    attempt_ordinal: int
    retry_after_ms: int | None
    delay_low_ms: int
    delay_high_ms: int
    delay_ms: int
    not_before_ms: int


def next_step(
    policy: RetryPolicy,
    *,
    failed_route: FallbackRoute,
    failed_route_attempt: int,
    failed_attempt_ordinal: int,
    completed_at_ms: int,
    retry_after_ms: int | None,
) -> Step | None:
    """Where and when to try next, or None when no route is left (route exhaustion)."""
    hint = bounded_hint_ms(retry_after_ms, policy.max_retry_after_ms)
    recorded_hint = None if retry_after_ms is None else hint
    if failed_route_attempt < failed_route.max_attempts:
        route, ordinal, decision = failed_route, failed_route_attempt + 1, Decision.RETRY
        high = retry_delay_ms(policy, failed_route_attempt, retry_after_ms)
    else:
        later = [r for r in policy.routes if r.priority == failed_route.priority + 1]
        if not later:
            return None
        route, ordinal, decision = later[0], 1, Decision.FALLBACK
        high = fallback_delay_ms(policy, retry_after_ms)
    attempt_ordinal = failed_attempt_ordinal + 1
    if policy.jitter is None:
        low, delay = high, high
    else:
        low = hint
        delay = jitter_draw(
            policy.jitter,
            idempotency_sha256=policy.idempotency_key_sha256,
            attempt_ordinal=attempt_ordinal,
            low=low,
            high=high,
        )
    return Step(
        decision=decision,
        route=route,
        route_attempt_ordinal=ordinal,
        attempt_ordinal=attempt_ordinal,
        retry_after_ms=recorded_hint,
        delay_low_ms=low,
        delay_high_ms=high,
        delay_ms=delay,
        not_before_ms=checked_add(completed_at_ms, delay, "not_before_ms"),
    )
