"""The pure retry/fallback evaluator: ``evaluate(policy, admission, attempts) -> Receipt``.

No clock and no I/O: time arrives as integers inside the observed attempts, the gates and
the optional ``now_ms`` / ``cancelled_at_ms``. The evaluator walks the attempts in ordinal
order and checks each against the attempt the policy planned (route, route release,
ordinals, logical request digest, idempotency digest, earliest start, scheduled delay, cost
reservation), then decides ``complete | retry | fallback | stop`` and, on stop, the
terminal. A mismatch raises a typed :class:`AttemptRejected` naming the field, so an
operator cannot splice in an unapproved route; any attempt after a terminal raises
:class:`PostTerminalAttempt`. Sums use checked int64 arithmetic.

Budget precedence when planning the next attempt (the first exceeded bound terminates):
total attempts → route exhaustion → cost (reserve the next route's worst case) → deadline
(``not_before ≥ deadline``) → the shared retry budget (a gate) → the route's breaker (a
gate: a rejected route is skipped for the next one with attempts left, whose cost and
deadline are checked again; none left is ``stop_circuit_open``). A success completing at
or after the deadline loses to ``stop_deadline``; an attempt the caller cancelled ends the
request as ``stop_cancelled``.

Gates are the shared guards' verdicts (:class:`~._guards.Gate`), recorded by the
controller and given back here, so a replay re-decides exactly as the run did; a gate no
planned dispatch asked for raises :class:`GateMismatch`.

Hedging (when the policy has it and attempt 1 runs on the primary route): attempts 2.. may
be hedges of attempt 1 (``hedge_ordinal`` 1, 2, …) on the hedge route, each no earlier
than ``first start + k × delay`` and only while an attempt of the group is still in flight
and none has succeeded. The group resolves together: the first success is the ``winner``
(the only result used); every other attempt is ``cancelled`` (stopped in flight after the
winner committed) or ``late`` (its result came after the winner's: evidence only), and all
of them are charged. A group without a success decides as one failure: non-retryable
before indeterminate before retryable, retried from the primary after the last one ended.

Auditing telemetry: build attempts from rows of the ``attempts`` Parquet view with
:func:`attempts_from_rows`. Conversion rules: ``start_time``/``end_time``/``not_before``
(timestamp ns, given as int ns, ``datetime`` or anything with an int ``.value`` in ns such
as a pandas Timestamp) become integer ms since the epoch by floor division; integer
columns are taken as they are; the ``retry_after_ms`` a row carries is the hint the
*previous* attempt received (that is when the retry owner records it), so it is moved one
attempt back — in :class:`ObservedAttempt`, ``retry_after_ms`` is the hint this attempt's
response carried. The last attempt's hint is not in telemetry; it only matters when it
alone would push the next ``not_before`` past the deadline.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from retryscope.control._guards import Gate, GuardKind
from retryscope.control._policy import (
    DEFAULT_ACCEPTED_OWNERS,
    Admission,
    FallbackRoute,
    RetryPolicy,
    validate_admission,
    validate_policy,
)
from retryscope.control._schedule import (
    PlannedAttempt,
    checked_add,
    hedge_step,
    next_route,
    next_step,
)
from retryscope.control._strict import Count
from retryscope.vocabulary import (
    CANCELLED_KEY,
    Decision,
    HedgeResult,
    Outcome,
    OutcomeKind,
    RetryOwner,
    Terminal,
)

_NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class ObservedAttempt:
    """One physical attempt as observed (by the controller or from telemetry).

    ``not_before_ms`` and ``backoff_delay_ms`` are what was scheduled before it;
    ``retry_after_ms`` is the Retry-After its own response carried (ms, raw or bounded).
    Without ``cost_actual_micros`` the reservation stands as the cost. ``hedge_ordinal``
    is 0 on a hedged first attempt and 1, 2, … on its hedges; ``hedge_result`` how it left
    the race; ``cancelled`` that it was stopped in flight (its effect is unknown).
    """

    route_id: str
    route_release: str
    route_attempt_ordinal: Count
    attempt_ordinal: Count
    logical_request_digest: str
    idempotency_digest: str
    start_ms: int
    end_ms: int
    outcome: Outcome
    outcome_kind: OutcomeKind | None = None
    not_before_ms: int | None = None
    backoff_delay_ms: int | None = None
    retry_after_ms: int | None = None
    cost_reserved_micros: int | None = None
    cost_actual_micros: int | None = None
    hedge_ordinal: Count | None = None
    hedge_result: HedgeResult | None = None
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What the retry owner decided after one attempt (or hedge group), and what it planned
    next."""

    attempt_ordinal: int
    route_id: str
    route_attempt_ordinal: int
    outcome: Outcome
    outcome_kind: OutcomeKind | None
    decision: Decision
    terminal: Terminal | None
    spent_micros: int
    next_route_id: str | None
    next_route_attempt_ordinal: int | None
    next_delay_ms: int | None
    next_not_before_ms: int | None
    hedge_result: HedgeResult | None = None


@dataclass(frozen=True, slots=True)
class Receipt:
    """The evaluation: inputs, the decision sequence, the terminal (None while running)."""

    policy: RetryPolicy
    admission: Admission
    attempts: tuple[ObservedAttempt, ...]
    gates: tuple[Gate, ...]
    decisions: tuple[DecisionRecord, ...]
    terminal: Terminal | None
    spent_micros: int
    next_attempt: PlannedAttempt | None
    evaluated_at_ms: int | None
    cancelled_at_ms: int | None


# --- rejections --------------------------------------------------------------------------------
class AttemptRejected(ValueError):
    """An observed attempt the policy did not plan; ``field`` names the mismatch."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PostTerminalAttempt(AttemptRejected):
    """An attempt after the terminal was decided."""


class RouteMismatch(AttemptRejected):
    """Wrong route: an unapproved route or a fallback before the route was exhausted."""


class ReleaseMismatch(AttemptRejected):
    """The route release differs from the policy's."""


class OrdinalMismatch(AttemptRejected):
    """Attempt or route-attempt ordinal out of sequence."""


class RequestDrift(AttemptRejected):
    """The attempt belongs to a different logical request."""


class IdempotencyDrift(AttemptRejected):
    """The attempt carries a different idempotency digest."""


class EarlyStart(AttemptRejected):
    """The attempt started before its not_before."""


class ScheduleDrift(AttemptRejected):
    """The recorded delay or not_before differs from the schedule."""


class JitterOutOfRange(AttemptRejected):
    """A jittered delay outside ``[bounded hint, capped delay]``."""


class DispatchAfterDeadline(AttemptRejected):
    """The attempt started at or after the absolute deadline."""


class InvalidObservation(AttemptRejected):
    """Inconsistent attempt data (outcome/kind families, end before start, hedge labels)."""


class CostMismatch(AttemptRejected):
    """Reservation differs from the route's worst case, or actual exceeds it."""


class HedgeRejected(AttemptRejected):
    """A hedge the policy does not allow: none configured or left, too early, refused by a
    guard, or started when nothing was left to race."""


class GateMismatch(AttemptRejected):
    """A gate no planned dispatch asked for (or one recorded twice)."""


# --- the evaluator -------------------------------------------------------------------------------
def _first_plan(route: FallbackRoute, decision: Decision | None) -> PlannedAttempt:
    return PlannedAttempt(route, 1, 1, route.max_attempt_cost_micros, decision)


GateKey = tuple[int, int, str, str]


def gate_key(
    attempt_ordinal: int, guard: GuardKind, route_id: str, hedge_ordinal: int | None = None
) -> GateKey:
    """What a gate decides on: the budgets per attempt, the breakers per attempt and route;
    a hedge's gates apart from those of a sequential attempt with the same ordinal."""
    route = route_id if guard is GuardKind.BREAKER else ""
    return (attempt_ordinal, -1 if hedge_ordinal is None else hedge_ordinal, guard.value, route)


def _check_observation(at: str, a: ObservedAttempt) -> None:
    if a.outcome is Outcome.SUCCESS:
        if a.outcome_kind is not None:
            raise InvalidObservation(f"{at}.outcome_kind", "a success has no failure kind")
    elif a.outcome_kind is None or a.outcome_kind.family is not a.outcome:
        kind = a.outcome_kind.value if a.outcome_kind else None
        raise InvalidObservation(
            f"{at}.outcome_kind", f"{kind!r} does not belong to {a.outcome.value!r}"
        )
    if a.cancelled and a.outcome is not Outcome.INDETERMINATE:
        raise InvalidObservation(f"{at}.outcome", "a cancelled attempt's effect is unknown")
    if a.end_ms < a.start_ms:
        raise InvalidObservation(f"{at}.end_ms", f"ends ({a.end_ms}) before it starts")


def _match(admission: Admission, plan: PlannedAttempt, a: ObservedAttempt, at: str) -> None:
    """Raise unless ``a`` is exactly the planned attempt."""
    _check_observation(at, a)
    if a.route_id != plan.route.route_id:
        raise RouteMismatch(
            f"{at}.route_id", f"{a.route_id!r} where the policy planned {plan.route.route_id!r}"
        )
    if a.route_release != plan.route.route_release_sha256:
        raise ReleaseMismatch(f"{at}.route_release", f"{a.route_release!r} is not the policy's")
    if a.attempt_ordinal != plan.attempt_ordinal:
        raise OrdinalMismatch(
            f"{at}.attempt_ordinal", f"{a.attempt_ordinal}, expected {plan.attempt_ordinal}"
        )
    if a.route_attempt_ordinal != plan.route_attempt_ordinal:
        raise OrdinalMismatch(
            f"{at}.route_attempt_ordinal",
            f"{a.route_attempt_ordinal}, expected {plan.route_attempt_ordinal}",
        )
    if a.logical_request_digest != admission.logical_request_sha256:
        raise RequestDrift(f"{at}.logical_request_digest", "differs from the admitted request")
    if a.idempotency_digest != admission.idempotency_key_sha256:
        raise IdempotencyDrift(f"{at}.idempotency_digest", "differs from the admitted key")
    if a.start_ms >= admission.deadline_ms:
        raise DispatchAfterDeadline(
            f"{at}.start_ms", f"{a.start_ms} is at or after the deadline {admission.deadline_ms}"
        )
    if plan.delay_ms is not None:
        assert plan.delay_low_ms is not None
        assert plan.delay_high_ms is not None
        if a.backoff_delay_ms is not None:
            if not plan.delay_low_ms <= a.backoff_delay_ms <= plan.delay_high_ms:
                raise JitterOutOfRange(
                    f"{at}.backoff_delay_ms",
                    f"{a.backoff_delay_ms} outside [{plan.delay_low_ms}, {plan.delay_high_ms}]",
                )
            if a.backoff_delay_ms != plan.delay_ms:
                raise ScheduleDrift(
                    f"{at}.backoff_delay_ms", f"{a.backoff_delay_ms}, scheduled {plan.delay_ms}"
                )
    elif a.backoff_delay_ms not in (None, 0):
        raise ScheduleDrift(f"{at}.backoff_delay_ms", "no backoff was scheduled before it")
    if plan.not_before_ms is not None:
        if a.not_before_ms is not None and a.not_before_ms != plan.not_before_ms:
            raise ScheduleDrift(
                f"{at}.not_before_ms", f"{a.not_before_ms}, scheduled {plan.not_before_ms}"
            )
        if a.start_ms < plan.not_before_ms:
            raise EarlyStart(
                f"{at}.start_ms", f"{a.start_ms} is before not_before {plan.not_before_ms}"
            )
    elif a.not_before_ms is not None:
        raise ScheduleDrift(f"{at}.not_before_ms", "no earliest start was scheduled for it")
    if a.cost_reserved_micros is not None and a.cost_reserved_micros != plan.reserve_micros:
        raise CostMismatch(
            f"{at}.cost_reserved_micros",
            f"{a.cost_reserved_micros}, the route reserves {plan.reserve_micros}",
        )
    if a.cost_actual_micros is not None and a.cost_actual_micros > plan.reserve_micros:
        raise CostMismatch(
            f"{at}.cost_actual_micros",
            f"{a.cost_actual_micros} exceeds the reservation {plan.reserve_micros}",
        )


_STOP_OF: dict[Outcome, Terminal] = {
    Outcome.NON_RETRYABLE: Terminal.STOP_NON_RETRYABLE,
    Outcome.INDETERMINATE: Terminal.STOP_INDETERMINATE,
}
_FAILURE_ORDER = (Outcome.NON_RETRYABLE, Outcome.INDETERMINATE, Outcome.RETRYABLE)
"""How a hedge group without a success decides: the most conservative failure first."""


class _Walk:
    """One evaluation: the running totals while the attempts are checked in order."""

    def __init__(self, policy: RetryPolicy, admission: Admission, gates: tuple[Gate, ...]) -> None:
        self.policy = policy
        self.admission = admission
        self.spent = 0
        self.used: dict[str, int] = {}
        self.decisions: list[DecisionRecord] = []
        self.terminal: Terminal | None = None
        self.plan: PlannedAttempt | None = None
        self.failure: tuple[int, int | None] | None = None
        """(completed at, hint) of the failure the current plan follows."""
        self._gates: dict[GateKey, int] = {}
        self._consumed: set[int] = set()
        self.gates = gates
        for i, g in enumerate(gates):
            key = gate_key(g.attempt_ordinal, g.snapshot.guard, g.route_id, g.hedge_ordinal)
            if key in self._gates:
                raise GateMismatch(f"gates[{i}]", f"a second verdict on {key}")
            self._gates[key] = i

    # -- gates ----------------------------------------------------------------------------
    def _gate(
        self, ordinal: int, guard: GuardKind, route_id: str, hedge: int | None = None
    ) -> Gate | None:
        index = self._gates.get(gate_key(ordinal, guard, route_id, hedge))
        if index is None:
            return None
        self._consumed.add(index)
        return self.gates[index]

    def unconsumed(self) -> None:
        for i, g in enumerate(self.gates):
            if i not in self._consumed:
                raise GateMismatch(
                    f"gates[{i}]",
                    f"no planned dispatch of attempt {g.attempt_ordinal} to {g.route_id!r} "
                    f"asked {g.snapshot.guard.value}",
                )

    # -- planning -------------------------------------------------------------------------
    def admit(self, plan: PlannedAttempt) -> None:
        """Set ``plan`` or the terminal for it: cost, deadline, retry budget, breakers."""
        policy, budget_checked = self.policy, False
        while True:
            if checked_add(self.spent, plan.reserve_micros, "spent_micros") > (
                policy.max_total_cost_micros
            ):
                self.terminal, self.plan = Terminal.STOP_COST_BUDGET, plan
                return
            if plan.not_before_ms is not None and plan.not_before_ms >= self.admission.deadline_ms:
                self.terminal, self.plan = Terminal.STOP_DEADLINE, plan
                return
            ordinal = plan.attempt_ordinal
            if ordinal > 1 and not budget_checked:
                budget_checked = True
                gate = self._gate(ordinal, GuardKind.RETRY_BUDGET, plan.route.route_id)
                if gate is not None and not gate.admitted:
                    self.terminal, self.plan = Terminal.STOP_RETRY_BUDGET, plan
                    return
            gate = self._gate(ordinal, GuardKind.BREAKER, plan.route.route_id)
            if gate is None or gate.admitted:
                self.plan = plan
                return
            skipped = self._skip(plan)
            if skipped is None:
                self.terminal, self.plan = Terminal.STOP_CIRCUIT_OPEN, plan
                return
            plan = skipped

    def _skip(self, plan: PlannedAttempt) -> PlannedAttempt | None:
        """The plan after ``plan``'s route was refused by its breaker."""
        if self.failure is None:  # the first attempt: the next route, at once
            later = next_route(self.policy, plan.route, self.used)
            return None if later is None else _first_plan(later, Decision.FALLBACK)
        completed, hint = self.failure
        return next_step(
            self.policy,
            self.admission,
            failed_route=plan.route,
            used=self.used,
            next_attempt_ordinal=plan.attempt_ordinal,
            completed_at_ms=completed,
            retry_after_ms=hint,
            skip_failed_route=True,
        )

    def after_failure(
        self, route_id: str, last_ordinal: int, completed: int, hint: int | None
    ) -> None:
        """Plan the attempt after a retryable failure, or the first bound it exceeds."""
        if last_ordinal >= self.policy.max_total_attempts:
            self.terminal, self.plan = Terminal.STOP_ATTEMPT_BUDGET, None
            return
        step = next_step(
            self.policy,
            self.admission,
            failed_route=self.policy.route(route_id),
            used=self.used,
            next_attempt_ordinal=last_ordinal + 1,
            completed_at_ms=completed,
            retry_after_ms=hint,
        )
        if step is None:
            self.terminal, self.plan = Terminal.STOP_ROUTE_EXHAUSTED, None
            return
        self.failure = (completed, hint)
        self.admit(step)

    # -- one attempt or hedge group ------------------------------------------------------
    def hedges(
        self, attempts: tuple[ObservedAttempt, ...], i: int, first: ObservedAttempt
    ) -> list[tuple[int, ObservedAttempt]]:
        """The hedges of ``first`` that follow it from index ``i``, each checked."""
        group: list[tuple[int, ObservedAttempt]] = []
        reserved = self.policy.route(first.route_id).max_attempt_cost_micros
        while True:
            k = len(group) + 1
            if i == len(attempts) or attempts[i].hedge_ordinal in (None, 0):
                self._refused_hedge(k)
                return group
            h, at = attempts[i], f"attempts[{i}]"
            step = hedge_step(
                self.policy,
                self.admission,
                first_start_ms=first.start_ms,
                group_reserved_micros=reserved,
                hedges_so_far=len(group),
            )
            if step is None:
                raise HedgeRejected(f"{at}.hedge_ordinal", "the policy allows no further hedge")
            if h.hedge_ordinal != step.hedge_ordinal:
                raise HedgeRejected(
                    f"{at}.hedge_ordinal", f"{h.hedge_ordinal}, expected {step.hedge_ordinal}"
                )
            for guard in (GuardKind.HEDGE_BUDGET, GuardKind.BREAKER):
                gate = self._gate(step.attempt_ordinal, guard, step.route.route_id, k)
                if gate is not None and not gate.admitted:
                    raise HedgeRejected(f"{at}.hedge_ordinal", f"{guard.value} refused it")
            _match(self.admission, step, h, at)
            # on a ms clock an attempt ending in the ms the hedge started may have ended
            # after it: only an earlier ms is before it
            racing = [first, *(g for _, g in group)]
            if any(g.outcome is Outcome.SUCCESS and g.end_ms < h.start_ms for g in racing):
                raise HedgeRejected(f"{at}.start_ms", "the race was already won when it started")
            if not any(g.end_ms >= h.start_ms for g in racing):
                raise HedgeRejected(
                    f"{at}.start_ms", "nothing it would race was still in flight: a retry"
                )
            reserved = checked_add(reserved, step.reserve_micros, "reserved")
            group.append((i, h))
            i += 1

    def _refused_hedge(self, k: int) -> None:
        """Consume the gates of hedge ``k`` when one refused it (why the race has no more
        hedges); an admitted hedge that was never dispatched stays a mismatch."""
        hedging = self.policy.hedging
        assert hedging is not None
        found = [
            index
            for guard in (GuardKind.HEDGE_BUDGET, GuardKind.BREAKER)
            if (index := self._gates.get(gate_key(1 + k, guard, hedging.route_id, k))) is not None
        ]
        if any(not self.gates[index].admitted for index in found):
            self._consumed.update(found)

    def record(
        self,
        a: ObservedAttempt,
        decision: Decision,
        hedge_result: HedgeResult | None,
    ) -> None:
        shown = self.plan if self.terminal is None else None
        self.decisions.append(
            DecisionRecord(
                attempt_ordinal=a.attempt_ordinal,
                route_id=a.route_id,
                route_attempt_ordinal=a.route_attempt_ordinal,
                outcome=a.outcome,
                outcome_kind=a.outcome_kind,
                decision=decision,
                terminal=self.terminal,
                spent_micros=self.spent,
                next_route_id=shown.route.route_id if shown else None,
                next_route_attempt_ordinal=shown.route_attempt_ordinal if shown else None,
                next_delay_ms=shown.delay_ms if shown else None,
                next_not_before_ms=shown.not_before_ms if shown else None,
                hedge_result=hedge_result,
            )
        )

    def charge(self, a: ObservedAttempt, reserve: int) -> None:
        cost = a.cost_actual_micros if a.cost_actual_micros is not None else reserve
        self.spent = checked_add(self.spent, cost, "spent_micros")
        self.used[a.route_id] = self.used.get(a.route_id, 0) + 1

    def resolve(self, group: list[tuple[int, ObservedAttempt]]) -> dict[int, HedgeResult | None]:
        """Decide after a single attempt or a hedge group; the hedge result of each."""
        members = [a for _, a in group]
        results: dict[int, HedgeResult | None] = {a.attempt_ordinal: None for a in members}
        winners = [a for a in members if a.outcome is Outcome.SUCCESS and not a.cancelled]
        self.plan = None
        if len(members) > 1 and winners:
            results.update(self._winner(group, winners))
            winner = next(a for a in members if results[a.attempt_ordinal] is HedgeResult.WINNER)
            late = winner.end_ms >= self.admission.deadline_ms
            self.terminal = Terminal.STOP_DEADLINE if late else Terminal.COMPLETE
            return results
        for index, a in group:
            if a.hedge_result is not None:
                raise InvalidObservation(
                    f"attempts[{index}].hedge_result", "only a race with a winner has results"
                )
        if any(a.cancelled for a in members):
            self.terminal = Terminal.STOP_CANCELLED
        elif winners:
            late = winners[0].end_ms >= self.admission.deadline_ms
            self.terminal = Terminal.STOP_DEADLINE if late else Terminal.COMPLETE
        else:
            outcome = next(o for o in _FAILURE_ORDER if any(a.outcome is o for a in members))
            if outcome is Outcome.RETRYABLE:
                last = members[-1]
                hints = [a.retry_after_ms for a in members if a.retry_after_ms is not None]
                self.after_failure(
                    members[0].route_id,
                    last.attempt_ordinal,
                    max(a.end_ms for a in members),
                    max(hints) if hints else None,
                )
            else:
                self.terminal = _STOP_OF[outcome]
        return results

    def _winner(
        self, group: list[tuple[int, ObservedAttempt]], winners: list[ObservedAttempt]
    ) -> dict[int, HedgeResult | None]:
        first_end = min(a.end_ms for a in winners)
        named = [(i, a) for i, a in group if a.hedge_result is HedgeResult.WINNER]
        if len(named) != 1 or named[0][1] not in winners or named[0][1].end_ms != first_end:
            index = named[0][0] if named else group[0][0]
            raise InvalidObservation(
                f"attempts[{index}].hedge_result", "the winner is the first success of the race"
            )
        winner = named[0][1]
        out: dict[int, HedgeResult | None] = {winner.attempt_ordinal: HedgeResult.WINNER}
        for index, a in group:
            if a is winner:
                continue
            if a.cancelled:
                expected: HedgeResult | None = HedgeResult.CANCELLED
                if a.end_ms < winner.end_ms:
                    raise InvalidObservation(
                        f"attempts[{index}].end_ms", "cancelled before the winner committed"
                    )
            elif a.end_ms == winner.end_ms:  # finished in the same ms: either order holds
                expected = a.hedge_result if a.hedge_result is HedgeResult.LATE else None
            else:
                expected = HedgeResult.LATE if a.end_ms > winner.end_ms else None
            if a.hedge_result is not expected:
                shown = expected.value if expected else None
                raise InvalidObservation(
                    f"attempts[{index}].hedge_result",
                    f"{_value(a.hedge_result)!r}, the race makes it {shown!r}",
                )
            out[a.attempt_ordinal] = expected
        return out


def race_results(members: Iterable[ObservedAttempt]) -> dict[int, HedgeResult | None]:
    """How each attempt of a hedge race left it, by attempt ordinal: the first success
    (earliest end, then lowest ordinal) wins; the others are ``cancelled`` if stopped in
    flight, ``late`` if they ended at or after the winner, else None (failed before it)."""
    group = list(members)
    winners = [a for a in group if a.outcome is Outcome.SUCCESS and not a.cancelled]
    if not winners:
        return {a.attempt_ordinal: None for a in group}
    w = min(winners, key=lambda a: (a.end_ms, a.attempt_ordinal))
    out: dict[int, HedgeResult | None] = {}
    for a in group:
        if a is w:
            out[a.attempt_ordinal] = HedgeResult.WINNER
        elif a.cancelled:
            out[a.attempt_ordinal] = HedgeResult.CANCELLED
        else:
            out[a.attempt_ordinal] = HedgeResult.LATE if a.end_ms >= w.end_ms else None
    return out


def _value(e: Any) -> Any:
    return None if e is None else e.value


def evaluate(
    policy: RetryPolicy,
    admission: Admission,
    observed_attempts: Iterable[ObservedAttempt],
    *,
    gates: Iterable[Gate] = (),
    now_ms: int | None = None,
    cancelled_at_ms: int | None = None,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> Receipt:
    """Validate ``policy`` and ``admission``, check every attempt against the plan, decide,
    and return a receipt.

    ``now_ms`` (optional) is when the caller asks: if no terminal was reached and the next
    attempt could not start before the deadline, the terminal is ``stop_deadline``.
    ``cancelled_at_ms`` is when the caller cancelled a request that had no terminal yet.
    """
    validate_policy(policy, accepted_owners=accepted_owners)
    validate_admission(policy, admission)
    attempts = tuple(observed_attempts)
    w = _Walk(policy, admission, tuple(gates))
    w.admit(_first_plan(policy.route_by_priority()[0], None))
    i = 0
    while i < len(attempts):
        a, at = attempts[i], f"attempts[{i}]"
        plan = w.plan
        if w.terminal is not None or plan is None:
            raise PostTerminalAttempt(at, f"attempt after terminal {_value(w.terminal)}")
        _match(admission, plan, a, at)
        hedged = policy.hedging is not None and a.attempt_ordinal == 1 and plan.route.priority == 0
        if a.hedge_ordinal not in ((None, 0) if hedged else (None,)):
            raise InvalidObservation(f"{at}.hedge_ordinal", "this attempt cannot be hedged")
        group = [(i, a), *(w.hedges(attempts, i + 1, a) if hedged else [])]
        i += len(group)
        w.charge(a, plan.reserve_micros)
        for _, h in group[1:]:
            w.charge(h, policy.route(h.route_id).max_attempt_cost_micros)
        results = w.resolve(group)
        decision = _decision(w.terminal, w.plan)
        for _, member in group:
            w.record(member, decision, results[member.attempt_ordinal])
    if w.terminal is None and cancelled_at_ms is not None:
        w.terminal = Terminal.STOP_CANCELLED
    plan = w.plan
    waiting = w.terminal is None and plan is not None and now_ms is not None
    if waiting and max(now_ms or 0, plan.not_before_ms or 0 if plan else 0) >= (
        admission.deadline_ms
    ):
        w.terminal = Terminal.STOP_DEADLINE
    w.unconsumed()
    return Receipt(
        policy=policy,
        admission=admission,
        attempts=attempts,
        gates=w.gates,
        decisions=tuple(w.decisions),
        terminal=w.terminal,
        spent_micros=w.spent,
        next_attempt=plan if w.terminal is None else None,
        evaluated_at_ms=now_ms,
        cancelled_at_ms=cancelled_at_ms,
    )


def _decision(terminal: Terminal | None, plan: PlannedAttempt | None) -> Decision:
    if terminal is Terminal.COMPLETE:
        return Decision.COMPLETE
    if terminal is None and plan is not None and plan.decision is not None:
        return plan.decision
    return Decision.STOP


# --- telemetry rows → observed attempts ----------------------------------------------------------
def _ms(value: Any, field: str) -> int | None:
    """Timestamp (int ns, datetime, or object with int ``.value`` ns) → floor ms."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a timestamp, got {value!r}")
    if isinstance(value, int):
        return value // _NS_PER_MS
    ns = getattr(value, "value", None)
    if isinstance(ns, int) and not isinstance(ns, bool):
        return ns // _NS_PER_MS
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    raise ValueError(f"{field}: expected a timestamp, got {type(value).__name__}")


def _opt_int(row: Mapping[str, Any], column: str) -> int | None:
    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{column}: expected an integer, got {value!r}")
    return value


def _attribute(row: Mapping[str, Any], key: str) -> Any:
    """A plain attribute of the row's ``attributes`` map (JSON-encoded values), or None."""
    attrs = row.get("attributes")
    if not attrs:
        return None
    pairs = attrs.items() if isinstance(attrs, Mapping) else attrs
    for k, value in pairs:
        if k == key:
            try:
                return json.loads(value) if isinstance(value, str) else value
            except ValueError:
                return None
    return None


def attempt_from_row(row: Mapping[str, Any], *, retry_after_ms: int | None) -> ObservedAttempt:
    """One ``attempts`` view row → :class:`ObservedAttempt` (see the module docstring).

    ``retry_after_ms`` is the hint this attempt's response carried, i.e. the
    ``retry_after_ms`` column of the *next* attempt's row.
    """
    start, end = _ms(row["start_time"], "start_time"), _ms(row["end_time"], "end_time")
    if start is None or end is None:
        raise ValueError("start_time/end_time: an attempt needs both")
    kind = row.get("outcome_kind")
    return ObservedAttempt(
        route_id=str(row["route_id"]),
        route_release=str(row["route_release"]),
        route_attempt_ordinal=int(row["route_attempt_ordinal"]),
        attempt_ordinal=int(row["attempt_ordinal"]),
        logical_request_digest=str(row["logical_request_digest"]),
        idempotency_digest=str(row["idempotency_digest"]),
        start_ms=start,
        end_ms=end,
        outcome=Outcome(row["outcome"]),
        outcome_kind=OutcomeKind(kind) if kind is not None else None,
        not_before_ms=_ms(row.get("not_before"), "not_before"),
        backoff_delay_ms=_opt_int(row, "backoff_delay_ms"),
        retry_after_ms=retry_after_ms,
        cost_reserved_micros=_opt_int(row, "cost_reserved_micros"),
        cost_actual_micros=_opt_int(row, "cost_actual_micros"),
        hedge_ordinal=_opt_int(row, "hedge_ordinal"),
        hedge_result=HedgeResult(hedge) if (hedge := row.get("hedge_result")) else None,
        cancelled=row.get("cancelled") is True or _attribute(row, CANCELLED_KEY) is True,
    )


def attempts_from_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[ObservedAttempt, ...]:
    """Rows of one logical request's attempts (one layer) → attempts in ordinal order.

    Each row's ``retry_after_ms`` moves to the attempt before it (the one that received it).
    """
    ordered = sorted(rows, key=lambda r: int(r["attempt_ordinal"]))
    out: list[ObservedAttempt] = []
    for i, row in enumerate(ordered):
        hint = _opt_int(ordered[i + 1], "retry_after_ms") if i + 1 < len(ordered) else None
        out.append(attempt_from_row(row, retry_after_ms=hint))
    return tuple(out)
