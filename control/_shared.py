"""The shared protection of one policy across all its requests.

:class:`SharedState` holds the current states of the pure machines in :mod:`._guards` — the
retry budget, the hedge budget and one circuit breaker per route — and applies their
transitions under a lock, with the caller's time as the argument. One instance serves
every request of a controller (sync or asyncio, any number of threads or tasks); several
controllers of the same policy may share one. A guard the policy does not configure
admits everything and records nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from retryscope._fork import reset_in_child
from retryscope.control._guards import (
    BudgetLimits,
    BudgetState,
    CircuitState,
    Gate,
    GuardKind,
    GuardSnapshot,
    Ticket,
    breaker_admit,
    breaker_record,
    breaker_snapshot,
    budget_admit,
    budget_release,
    budget_request,
    budget_snapshot,
)
from retryscope.control._policy import RetryPolicy


@dataclass(frozen=True, slots=True)
class Pass:
    """An admission by one guard: the gate to record and what to hand back when done."""

    gate: Gate
    ticket: Ticket | None


class SharedState:
    """Retry budget, hedge budget and per-route breakers of ``policy`` (thread-safe)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._limits: dict[GuardKind, BudgetLimits] = {}
        if (b := policy.retry_budget) is not None:
            self._limits[GuardKind.RETRY_BUDGET] = BudgetLimits(
                b.budget_percent, b.min_retry_concurrency
            )
        if (h := policy.hedging) is not None:
            self._limits[GuardKind.HEDGE_BUDGET] = BudgetLimits(
                h.budget_percent, h.min_hedge_concurrency
            )
        self._budgets: dict[GuardKind, BudgetState] = {k: BudgetState() for k in self._limits}
        self._breakers: dict[str, CircuitState] = {
            r.route_id: CircuitState() for r in policy.routes
        }
        reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock, and no request, dispatch or probe in flight.
        Those of the parent's other threads never end in the child: they would hold its
        budget slots, and a half-open breaker's probes, for ever. What the breakers
        learnt about each route stays."""
        self._lock = threading.Lock()
        self._budgets = {
            kind: budget_request(self._limits[kind], replace(s, requests=0, in_flight=0), 0)
            for kind, s in self._budgets.items()
        }
        self._breakers = {route: replace(s, probes=0) for route, s in self._breakers.items()}

    def request_started(self) -> None:
        """A request of this policy entered flight (the budgets' base grows)."""
        with self._lock:
            for kind, limits in self._limits.items():
                self._budgets[kind] = budget_request(limits, self._budgets[kind], 1)

    def request_finished(self) -> None:
        with self._lock:
            for kind, limits in self._limits.items():
                self._budgets[kind] = budget_request(limits, self._budgets[kind], -1)

    def admit(
        self,
        guard: GuardKind,
        attempt_ordinal: int,
        route_id: str,
        now_ms: int,
        *,
        hedge_ordinal: int | None = None,
    ) -> tuple[Gate, Pass | None] | None:
        """Ask ``guard`` about dispatching ``attempt_ordinal`` to ``route_id`` at ``now_ms``:
        None when the policy has no such guard, else the gate and, when admitted, the pass
        to :meth:`release` afterwards."""
        with self._lock:
            if guard is GuardKind.BREAKER:
                cfg = self.policy.circuit_breaker
                if cfg is None:
                    return None
                state, ticket, snap = breaker_admit(cfg, self._breakers[route_id], route_id, now_ms)
                self._breakers[route_id] = state
                admitted = ticket is not None
            else:
                limits = self._limits.get(guard)
                if limits is None:
                    return None
                budget, admitted, snap = budget_admit(limits, self._budgets[guard], guard, now_ms)
                self._budgets[guard] = budget
                ticket = None
        gate = Gate(attempt_ordinal, route_id, admitted, snap, hedge_ordinal)
        return gate, (Pass(gate, ticket) if admitted else None)

    def release(self, granted: Pass, *, failed: bool | None, now_ms: int) -> None:
        """The dispatch ``granted`` admitted is over: free its budget slot, or report its
        outcome to the route's breaker (``failed`` None: it says nothing about the route)."""
        guard = granted.gate.snapshot.guard
        with self._lock:
            if guard is GuardKind.BREAKER:
                cfg = self.policy.circuit_breaker
                assert cfg is not None
                assert granted.ticket is not None
                route = granted.gate.route_id
                self._breakers[route] = breaker_record(
                    cfg, self._breakers[route], granted.ticket, failed, now_ms
                )
            else:
                self._budgets[guard] = budget_release(self._limits[guard], self._budgets[guard])

    def snapshot(self, guard: GuardKind, name: str, now_ms: int) -> GuardSnapshot | None:
        """The guard's state now (``name``: the route for a breaker), or None."""
        with self._lock:
            if guard is GuardKind.BREAKER:
                cfg = self.policy.circuit_breaker
                if cfg is None:
                    return None
                return breaker_snapshot(cfg, self._breakers[name], name, now_ms)
            limits = self._limits.get(guard)
            if limits is None:
                return None
            return budget_snapshot(limits, self._budgets[guard], guard, now_ms)
