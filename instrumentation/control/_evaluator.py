"""The pure retry/fallback evaluator: ``evaluate(policy, observed_attempts) -> Receipt``.

No clock and no I/O: time arrives as integers inside the observed attempts (and as the
optional ``now_ms``). The evaluator walks the attempts in order and, for each one, checks
it against the attempt the policy planned (route, route release, ordinals, logical
request digest, idempotency digest, earliest start, scheduled delay, cost reservation),
then decides ``complete | retry | fallback | stop`` and, on stop, the terminal. A
mismatch raises a typed :class:`AttemptRejected` naming the field, so an operator cannot
splice in an unapproved route; any attempt after a terminal raises
:class:`PostTerminalAttempt`. Sums use checked int64 arithmetic.

Budget precedence after a retryable failure (the first exceeded bound terminates):
total attempts → route exhaustion → cost (reserve the next route's worst case) →
deadline (``not_before ≥ deadline``). A success completing at or after the deadline
loses to ``stop_deadline``.

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

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from retryscope.instrumentation.control._policy import (
    DEFAULT_ACCEPTED_OWNERS,
    FallbackRoute,
    RetryPolicy,
    validate_policy,
)
from retryscope.instrumentation.control._schedule import Step, checked_add, next_step
from retryscope.vocabulary import Decision, Outcome, OutcomeKind, RetryOwner, Terminal

_NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class ObservedAttempt:
    """One physical attempt as observed (by the controller or from telemetry).

    ``not_before_ms`` and ``backoff_delay_ms`` are what was scheduled before it;
    ``retry_after_ms`` is the Retry-After its own response carried (ms, raw or bounded).
    Without ``cost_actual_micros`` the reservation stands as the cost.
    """

    route_id: str
    route_release: str
    route_attempt_ordinal: int
    attempt_ordinal: int
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


@dataclass(frozen=True, slots=True)
class PlannedAttempt:
    """The attempt the policy allows next; ``delay``/``not_before`` are None for the first."""

    route: FallbackRoute
    attempt_ordinal: int
    route_attempt_ordinal: int
    decision: Decision | None
    retry_after_ms: int | None
    delay_low_ms: int | None
    delay_high_ms: int | None
    delay_ms: int | None
    not_before_ms: int | None
    reserve_micros: int


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What the retry owner decided after one attempt, and what it planned next."""

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


@dataclass(frozen=True, slots=True)
class Receipt:
    """The evaluation: inputs, the decision sequence, the terminal (None while running)."""

    policy: RetryPolicy
    attempts: tuple[ObservedAttempt, ...]
    decisions: tuple[DecisionRecord, ...]
    terminal: Terminal | None
    spent_micros: int
    next_attempt: PlannedAttempt | None
    evaluated_at_ms: int | None


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
    """Inconsistent attempt data (outcome/kind families, end before start)."""


class CostMismatch(AttemptRejected):
    """Reservation differs from the route's worst case, or actual exceeds it."""


# --- the evaluator -------------------------------------------------------------------------------
def _first_plan(policy: RetryPolicy) -> PlannedAttempt:
    route = policy.route_by_priority()[0]
    return PlannedAttempt(
        route=route,
        attempt_ordinal=1,
        route_attempt_ordinal=1,
        decision=None,
        retry_after_ms=None,
        delay_low_ms=None,
        delay_high_ms=None,
        delay_ms=None,
        not_before_ms=None,
        reserve_micros=route.max_attempt_cost_micros,
    )


def _plan_of(step: Step) -> PlannedAttempt:
    return PlannedAttempt(
        route=step.route,
        attempt_ordinal=step.attempt_ordinal,
        route_attempt_ordinal=step.route_attempt_ordinal,
        decision=step.decision,
        retry_after_ms=step.retry_after_ms,
        delay_low_ms=step.delay_low_ms,
        delay_high_ms=step.delay_high_ms,
        delay_ms=step.delay_ms,
        not_before_ms=step.not_before_ms,
        reserve_micros=step.route.max_attempt_cost_micros,
    )


def _check_observation(at: str, a: ObservedAttempt) -> None:
    if a.outcome is Outcome.SUCCESS:
        if a.outcome_kind is not None:
            raise InvalidObservation(f"{at}.outcome_kind", "a success has no failure kind")
    elif a.outcome_kind is None or a.outcome_kind.family is not a.outcome:
        kind = a.outcome_kind.value if a.outcome_kind else None
        raise InvalidObservation(
            f"{at}.outcome_kind", f"{kind!r} does not belong to {a.outcome.value!r}"
        )
    if a.end_ms < a.start_ms:
        raise InvalidObservation(f"{at}.end_ms", f"ends ({a.end_ms}) before it starts")


def _match(policy: RetryPolicy, plan: PlannedAttempt, a: ObservedAttempt, at: str) -> None:
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
    if a.logical_request_digest != policy.logical_request_sha256:
        raise RequestDrift(f"{at}.logical_request_digest", "differs from the policy's request")
    if a.idempotency_digest != policy.idempotency_key_sha256:
        raise IdempotencyDrift(f"{at}.idempotency_digest", "differs from the policy's key")
    if a.start_ms >= policy.deadline_ms:
        raise DispatchAfterDeadline(
            f"{at}.start_ms", f"{a.start_ms} is at or after the deadline {policy.deadline_ms}"
        )
    if plan.not_before_ms is not None:
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
        if a.not_before_ms is not None and a.not_before_ms != plan.not_before_ms:
            raise ScheduleDrift(
                f"{at}.not_before_ms", f"{a.not_before_ms}, scheduled {plan.not_before_ms}"
            )
        if a.start_ms < plan.not_before_ms:
            raise EarlyStart(
                f"{at}.start_ms", f"{a.start_ms} is before not_before {plan.not_before_ms}"
            )
    elif a.backoff_delay_ms not in (None, 0) or a.not_before_ms is not None:
        raise ScheduleDrift(f"{at}.backoff_delay_ms", "the first attempt has no backoff")
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


def _admit_next(
    policy: RetryPolicy, a: ObservedAttempt, used: int, spent: int
) -> tuple[Terminal | None, PlannedAttempt | None]:
    """After a retryable failure: the next plan, or the first bound it would exceed."""
    if used >= policy.max_total_attempts:
        return Terminal.STOP_ATTEMPT_BUDGET, None
    route = next(r for r in policy.routes if r.route_id == a.route_id)
    step = next_step(
        policy,
        failed_route=route,
        failed_route_attempt=a.route_attempt_ordinal,
        failed_attempt_ordinal=a.attempt_ordinal,
        completed_at_ms=a.end_ms,
        retry_after_ms=a.retry_after_ms,
    )
    if step is None:
        return Terminal.STOP_ROUTE_EXHAUSTED, None
    plan = _plan_of(step)
    if checked_add(spent, plan.reserve_micros, "spent_micros") > policy.max_total_cost_micros:
        return Terminal.STOP_COST_BUDGET, plan
    if step.not_before_ms >= policy.deadline_ms:
        return Terminal.STOP_DEADLINE, plan
    return None, plan


_STOP_OF: dict[Outcome, Terminal] = {
    Outcome.NON_RETRYABLE: Terminal.STOP_NON_RETRYABLE,
    Outcome.INDETERMINATE: Terminal.STOP_INDETERMINATE,
}


def evaluate(
    policy: RetryPolicy,
    observed_attempts: Iterable[ObservedAttempt],
    *,
    now_ms: int | None = None,
    accepted_owners: Collection[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
) -> Receipt:
    """Validate ``policy``, check every attempt against the plan, decide, and return a receipt.

    ``now_ms`` (optional) is when the caller asks: if no terminal was reached and the next
    attempt could not start before the deadline, the terminal is ``stop_deadline``.
    """
    validate_policy(policy, accepted_owners=accepted_owners)
    attempts = tuple(observed_attempts)
    plan: PlannedAttempt | None = _first_plan(policy)
    terminal: Terminal | None = None
    spent = 0
    decisions: list[DecisionRecord] = []
    assert plan is not None
    if plan.reserve_micros > policy.max_total_cost_micros:
        terminal = Terminal.STOP_COST_BUDGET
    for i, a in enumerate(attempts):
        at = f"attempts[{i}]"
        if terminal is not None or plan is None:
            raise PostTerminalAttempt(at, f"attempt after terminal {terminal}")
        _match(policy, plan, a, at)
        charge = a.cost_actual_micros if a.cost_actual_micros is not None else plan.reserve_micros
        spent = checked_add(spent, charge, "spent_micros")
        if a.outcome is Outcome.SUCCESS:
            late = a.end_ms >= policy.deadline_ms
            terminal = Terminal.STOP_DEADLINE if late else Terminal.COMPLETE
            decision, plan = (Decision.STOP if late else Decision.COMPLETE), None
        elif a.outcome is Outcome.RETRYABLE:
            terminal, plan = _admit_next(policy, a, i + 1, spent)
            decision = (plan.decision if plan and not terminal else None) or Decision.STOP
        else:
            terminal, decision, plan = _STOP_OF[a.outcome], Decision.STOP, None
        shown = plan if terminal is None else None
        decisions.append(
            DecisionRecord(
                attempt_ordinal=a.attempt_ordinal,
                route_id=a.route_id,
                route_attempt_ordinal=a.route_attempt_ordinal,
                outcome=a.outcome,
                outcome_kind=a.outcome_kind,
                decision=decision,
                terminal=terminal,
                spent_micros=spent,
                next_route_id=shown.route.route_id if shown else None,
                next_route_attempt_ordinal=shown.route_attempt_ordinal if shown else None,
                next_delay_ms=shown.delay_ms if shown else None,
                next_not_before_ms=shown.not_before_ms if shown else None,
            )
        )
    waiting = terminal is None and plan is not None and now_ms is not None
    if waiting and max(now_ms or 0, plan.not_before_ms or 0 if plan else 0) >= policy.deadline_ms:
        terminal = Terminal.STOP_DEADLINE
    return Receipt(
        policy=policy,
        attempts=attempts,
        decisions=tuple(decisions),
        terminal=terminal,
        spent_micros=spent,
        next_attempt=plan if terminal is None else None,
        evaluated_at_ms=now_ms,
    )


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
        delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros // 1000
    raise ValueError(f"{field}: expected a timestamp, got {type(value).__name__}")


def _opt_int(row: Mapping[str, Any], column: str) -> int | None:
    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{column}: expected an integer, got {value!r}")
    return value


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
