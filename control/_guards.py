"""Shared protection as pure state machines: a concurrency budget and a circuit breaker.

Retries handle one request's failures; these protect the system across requests. Their
state is shared and time-dependent, so every function here takes the state and the time
(integer ms) and returns the next state — no clock, no lock, no I/O (the holder in
:mod:`._shared` serialises access). Each verdict comes with a :class:`GuardSnapshot`
(guard, name, generation, state, tokens, time) that the controller records in the routing
decision (a :class:`Gate`) and on the attempt span, so a replay sees why a dispatch was
allowed, skipped or stopped.

* :class:`BudgetState` — Envoy's retry budget, also used for hedges: an extra dispatch is
  admitted while those in flight stay below ``max(minimum, in-flight requests × percent /
  100)``; ``tokens`` is how many more would be admitted now. The budget's generation counts
  its changes between ``available`` and ``exhausted``.
* :class:`CircuitState` — a per-route breaker: ``closed`` counts outcomes in
  :data:`~._policy.BREAKER_BUCKETS` buckets over the sampling window and opens when the
  window holds at least ``minimum_throughput`` outcomes of which ``failure_percent`` % or
  more failed; ``open`` rejects until ``opened_at + break_duration`` and then turns
  ``half_open``, which admits at most ``half_open_probes`` probes at a time (``tokens``:
  probe slots left); a probe's success closes it, a failure opens it again. Every state
  change bumps the generation; an outcome reported under an older generation (a dispatch
  admitted before the last change) is ignored, so a late result cannot move the breaker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Final

from retryscope.control._policy import BREAKER_BUCKETS, CircuitBreakerPolicy
from retryscope.vocabulary import BreakerState


class GuardKind(enum.StrEnum):
    RETRY_BUDGET = "retry_budget"
    HEDGE_BUDGET = "hedge_budget"
    BREAKER = "breaker"


class BudgetLevel(enum.StrEnum):
    AVAILABLE = "available"
    EXHAUSTED = "exhausted"


@dataclass(frozen=True, slots=True)
class GuardSnapshot:
    """A guard as it stood when it decided: ``name`` is the route for a breaker."""

    guard: GuardKind
    name: str
    generation: int
    state: str
    tokens: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class Gate:
    """A shared guard's verdict on the dispatch of ``attempt_ordinal`` to ``route_id``
    (``hedge_ordinal`` set when that dispatch is a hedge)."""

    attempt_ordinal: int
    route_id: str
    admitted: bool
    snapshot: GuardSnapshot
    hedge_ordinal: int | None = None


# --- the concurrency budget (retries, hedges) -----------------------------------------------
@dataclass(frozen=True, slots=True)
class BudgetLimits:
    percent: int
    minimum: int


@dataclass(frozen=True, slots=True)
class BudgetState:
    generation: int = 0
    requests: int = 0
    in_flight: int = 0
    level: BudgetLevel = BudgetLevel.AVAILABLE


def budget_limit(limits: BudgetLimits, s: BudgetState) -> int:
    """Extra dispatches allowed in flight at once for ``s.requests`` requests in flight."""
    return max(limits.minimum, s.requests * limits.percent // 100)


def _settle(limits: BudgetLimits, s: BudgetState) -> BudgetState:
    level = (
        BudgetLevel.AVAILABLE if s.in_flight < budget_limit(limits, s) else BudgetLevel.EXHAUSTED
    )
    if level is s.level:
        return s
    return replace(s, level=level, generation=s.generation + 1)


def budget_snapshot(
    limits: BudgetLimits, s: BudgetState, kind: GuardKind, now_ms: int
) -> GuardSnapshot:
    tokens = max(0, budget_limit(limits, s) - s.in_flight)
    return GuardSnapshot(kind, kind.value, s.generation, s.level.value, tokens, now_ms)


def budget_request(limits: BudgetLimits, s: BudgetState, delta: int) -> BudgetState:
    """A request entered (``delta`` 1) or left (−1) flight."""
    return _settle(limits, replace(s, requests=max(0, s.requests + delta)))


def budget_admit(
    limits: BudgetLimits, s: BudgetState, kind: GuardKind, now_ms: int
) -> tuple[BudgetState, bool, GuardSnapshot]:
    """Admit one more extra dispatch if in flight < limit; the snapshot is taken before."""
    snap = budget_snapshot(limits, s, kind, now_ms)
    if s.in_flight < budget_limit(limits, s):
        return _settle(limits, replace(s, in_flight=s.in_flight + 1)), True, snap
    return s, False, snap


def budget_release(limits: BudgetLimits, s: BudgetState) -> BudgetState:
    """An admitted extra dispatch ended."""
    return _settle(limits, replace(s, in_flight=max(0, s.in_flight - 1)))


# --- the circuit breaker -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ticket:
    """What a breaker admitted: under which generation, and whether as a probe."""

    generation: int
    probe: bool


@dataclass(frozen=True, slots=True)
class CircuitState:
    state: BreakerState = BreakerState.CLOSED
    generation: int = 0
    opened_at_ms: int = 0
    buckets: tuple[tuple[int, int, int], ...] = ()
    """(bucket start ms, successes, failures), oldest first, within the sampling window."""
    probes: int = 0


_CLOSED: Final = BreakerState.CLOSED
_OPEN: Final = BreakerState.OPEN
_HALF_OPEN: Final = BreakerState.HALF_OPEN


def _move(s: CircuitState, state: BreakerState, now_ms: int) -> CircuitState:
    return CircuitState(state, s.generation + 1, now_ms if state is _OPEN else s.opened_at_ms)


def _window(
    cfg: CircuitBreakerPolicy, s: CircuitState, now_ms: int
) -> tuple[tuple[int, int, int], ...]:
    return tuple(b for b in s.buckets if b[0] + cfg.sampling_duration_ms > now_ms)


def breaker_tokens(cfg: CircuitBreakerPolicy, s: CircuitState) -> int:
    return cfg.half_open_probes - s.probes if s.state is _HALF_OPEN else 0


def breaker_snapshot(
    cfg: CircuitBreakerPolicy, s: CircuitState, route_id: str, now_ms: int
) -> GuardSnapshot:
    return GuardSnapshot(
        GuardKind.BREAKER, route_id, s.generation, s.state.value, breaker_tokens(cfg, s), now_ms
    )


def breaker_admit(
    cfg: CircuitBreakerPolicy, s: CircuitState, route_id: str, now_ms: int
) -> tuple[CircuitState, Ticket | None, GuardSnapshot]:
    """Admit a dispatch to the route (None: rejected). An open breaker whose break has
    elapsed turns half-open first; the snapshot shows the state that decided."""
    if s.state is _OPEN and now_ms >= s.opened_at_ms + cfg.break_duration_ms:
        s = _move(s, _HALF_OPEN, now_ms)
    snap = breaker_snapshot(cfg, s, route_id, now_ms)
    if s.state is _CLOSED:
        return s, Ticket(s.generation, probe=False), snap
    if s.state is _HALF_OPEN and s.probes < cfg.half_open_probes:
        return replace(s, probes=s.probes + 1), Ticket(s.generation, probe=True), snap
    return s, None, snap


def breaker_record(
    cfg: CircuitBreakerPolicy, s: CircuitState, ticket: Ticket, failed: bool | None, now_ms: int
) -> CircuitState:
    """The outcome of a dispatch admitted with ``ticket``: ``failed`` True/False, or None
    when it says nothing about the route (cancelled)."""
    if ticket.generation != s.generation:
        return s  # admitted before the last state change: evidence only
    if ticket.probe:
        s = replace(s, probes=max(0, s.probes - 1))
        if failed is None:
            return s
        return _move(s, _OPEN if failed else _CLOSED, now_ms)
    if s.state is not _CLOSED or failed is None:
        return s
    width = cfg.sampling_duration_ms // BREAKER_BUCKETS
    start = now_ms - now_ms % width
    buckets = list(_window(cfg, s, now_ms))
    if buckets and buckets[-1][0] == start:
        _, ok, bad = buckets[-1]
        buckets[-1] = (start, ok + (not failed), bad + failed)
    else:
        buckets.append((start, int(not failed), int(failed)))
    total = sum(b[1] + b[2] for b in buckets)
    failures = sum(b[2] for b in buckets)
    if total >= cfg.minimum_throughput and failures * 100 >= cfg.failure_percent * total:
        return _move(s, _OPEN, now_ms)
    return replace(s, buckets=tuple(buckets))
