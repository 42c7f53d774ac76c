"""Every precedence rule the design states, exactly at its boundary, on every path that
applies it: each test here fails when its comparison is flipped (``>=`` ↔ ``>``).

* A success completing at or after the deadline loses to ``stop_deadline``: the evaluator
  (a single attempt and a hedge race's winner), the controller, the context API's derived
  terminal, and the analytics' late successes.
* ``not_before`` at the deadline is ``stop_deadline`` (and nothing starts at the deadline):
  the evaluator's plan, its ``now`` check, the dispatch check, hedges and polls.
* The first exceeded budget wins: attempts → routes → cost → deadline, each one exactly at
  its bound.
* A Retry-After equal to the cap is honoured in full and is not flagged as capped.
* An attempt may cost exactly its reservation, not one micro more.
* A hedge starting in the ms its race was won, or in the ms the attempt it races ended, is
  still a hedge (a ms clock cannot order them); one ms later it is rejected.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from retryscope import vocabulary as v
from retryscope.control._calls import CallResult, Dispatch
from retryscope.control._controller import RetryController
from retryscope.control._evaluator import (
    CostMismatch,
    DispatchAfterDeadline,
    HedgeRejected,
    ObservedAttempt,
    evaluate,
)
from retryscope.control._lab import (
    FALLBACK,
    IDEMPOTENCY_KEY,
    OPERATION,
    PRIMARY,
    REQUEST_PAYLOAD,
    TENANT,
    reference_admission,
    reference_attempts,
    reference_policy,
)
from retryscope.control._policy import HedgePolicy, PollPolicy
from retryscope.control._schedule import (
    bounded_hint_ms,
    hedge_step,
    next_poll_ms,
    retry_delay_ms,
)
from retryscope.http_rules import parse_retry_after
from retryscope.instrumentation import logical_request
from retryscope.vocabulary import HedgeResult, Outcome, OutcomeKind, Terminal

MS = 1_000_000
ATTEMPTS = reference_attempts()  # the fallback succeeds at 1,900 ms; its not_before 1,650 ms


def _terminal(deadline_ms: int, attempts: tuple[ObservedAttempt, ...] = ATTEMPTS, **kw: Any) -> Any:
    return evaluate(reference_policy(), reference_admission(deadline_ms), attempts, **kw).terminal


# --- a success at the deadline ---------------------------------------------------------------
def test_evaluator_a_success_at_the_deadline_loses_one_ms_before_it_wins() -> None:
    assert _terminal(1_900) is Terminal.STOP_DEADLINE
    assert _terminal(1_901) is Terminal.COMPLETE


def test_evaluator_a_hedge_race_won_at_the_deadline_loses() -> None:
    policy = replace(reference_policy(), hedging=HedgePolicy(FALLBACK.route_id, 300, 1, 10, 1))
    first = replace(
        ATTEMPTS[0],
        end_ms=1_600,
        outcome=Outcome.INDETERMINATE,
        outcome_kind=OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE,
        retry_after_ms=None,
        cost_actual_micros=None,
        hedge_ordinal=0,
        hedge_result=HedgeResult.CANCELLED,
        cancelled=True,
    )
    hedge = replace(
        ATTEMPTS[2],
        attempt_ordinal=2,
        start_ms=1_300,
        end_ms=1_500,
        not_before_ms=1_300,
        backoff_delay_ms=None,
        hedge_ordinal=1,
        hedge_result=HedgeResult.WINNER,
    )
    race = (first, hedge)
    assert evaluate(policy, reference_admission(1_500), race).terminal is Terminal.STOP_DEADLINE
    assert evaluate(policy, reference_admission(1_501), race).terminal is Terminal.COMPLETE


@pytest.mark.parametrize(("deadline", "terminal"), [(1_100, "stop_deadline"), (1_101, "complete")])
def test_controller_a_success_at_the_deadline_loses(
    deadline: int, terminal: str, clock: Any, spans: Any
) -> None:
    def call(d: Dispatch) -> CallResult:
        clock.advance_ms(100)  # answers at 1,100 ms
        return CallResult(value="answer")

    result = RetryController(
        reference_policy(), clock=clock, sleep=clock.sleep, tracer_provider=spans.provider
    ).run(
        call,
        request=REQUEST_PAYLOAD,
        idempotency_key=IDEMPOTENCY_KEY,
        operation=OPERATION,
        tenant=TENANT,
        deadline_ms=deadline,
    )
    assert result.terminal.value == terminal
    assert result.value == (None if terminal == "stop_deadline" else "answer")


def _derived(deadline_ns: int, ends_at_ns: int, spans: Any) -> str:
    """The context API's terminal for a request whose only attempt succeeds at
    ``ends_at_ns`` and that sets no terminal of its own."""
    now = [1_000 * MS]
    with logical_request(
        operation="chat",
        deadline=deadline_ns,
        clock=lambda: now[0],
        tracer_provider=spans.provider,
    ) as req:
        with req.attempt("primary") as a:
            now[0] = ends_at_ns
            a.set_outcome("success")
    (span,) = [
        s
        for s in spans.exporter.get_finished_spans()
        if s.attributes[v.SPAN_ROLE.key] == "logical_request"
    ]
    spans.exporter.clear()
    return str(span.attributes[v.TERMINAL.key])


def test_context_api_a_success_at_the_deadline_derives_stop_deadline(spans: Any) -> None:
    deadline = 2_000 * MS
    assert _derived(deadline, deadline, spans) == "stop_deadline"
    assert _derived(deadline, deadline - 1, spans) == "complete"


def test_analytics_count_a_success_at_the_deadline_as_late(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from retryscope.analytics import build_report, connect, findings
    from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(tmp_path)))
    for deadline_ms, ends_ms in ((2_000, 2_000), (2_000, 1_999)):
        now = [1_000 * MS]
        with logical_request(
            operation="chat", deadline=deadline_ms * MS, clock=lambda now=now: now[0],
            tracer_provider=provider,
        ) as req:  # fmt: skip
            with req.attempt("primary") as a:
                now[0] = ends_ms * MS
                a.set_outcome("success")
            req.set_terminal(Terminal.COMPLETE)  # what a harness that ignores the rule says
    provider.shutdown()
    con, _ = connect(tmp_path)
    deadline = build_report(con)["deadline"]
    assert (deadline["late_successes"], deadline["deadline_misses"]) == (1, 1)
    (late,) = findings(con, rule="late_success").to_pylist()
    assert json.loads(late["evidence"])["late_ms"] == 0.0


# --- not_before at the deadline ---------------------------------------------------------------
def test_evaluator_not_before_at_the_deadline_stops() -> None:
    assert _terminal(1_650, ATTEMPTS[:2]) is Terminal.STOP_DEADLINE  # fallback not_before 1,650
    receipt = evaluate(reference_policy(), reference_admission(1_651), ATTEMPTS[:2])
    assert receipt.terminal is None
    assert receipt.next_attempt is not None
    assert receipt.next_attempt.not_before_ms == 1_650


def test_evaluator_waiting_until_the_deadline_stops() -> None:
    assert _terminal(5_000, ATTEMPTS[:1], now_ms=5_000) is Terminal.STOP_DEADLINE
    assert _terminal(5_000, ATTEMPTS[:1], now_ms=4_999) is None


def test_nothing_is_dispatched_at_the_deadline() -> None:
    at = replace(ATTEMPTS[0], start_ms=5_000, end_ms=5_001)
    with pytest.raises(DispatchAfterDeadline):
        _terminal(5_000, (at,))
    assert _terminal(5_001, (at,)) is Terminal.STOP_DEADLINE  # started 1 ms before: admitted


def test_a_hedge_due_at_the_deadline_is_not_planned() -> None:
    policy = replace(reference_policy(), hedging=HedgePolicy(FALLBACK.route_id, 300, 1, 10, 1))

    def step(deadline: int) -> Any:
        return hedge_step(
            policy,
            reference_admission(deadline),
            first_start_ms=1_000,
            group_reserved_micros=PRIMARY.max_attempt_cost_micros,
            hedges_so_far=0,
        )

    assert step(1_300) is None
    assert step(1_301) is not None


@pytest.mark.parametrize(
    ("changes", "hedges_so_far", "planned"),
    [
        ({"max_hedges": 2}, 1, True),  # the hedge budget: a second hedge of two
        ({"max_hedges": 1}, 1, False),
        ({"max_total_attempts": 2}, 0, True),  # the primary and its hedge: two attempts
        ({"max_total_attempts": 1}, 0, False),
        ({"max_total_cost_micros": 500_000}, 0, True),  # 200,000 + 300,000 reserved
        ({"max_total_cost_micros": 499_999}, 0, False),
    ],
)
def test_a_hedge_counts_against_every_budget_exactly_at_its_bound(
    changes: dict[str, int], hedges_so_far: int, planned: bool
) -> None:
    limits = dict(changes)
    hedging = HedgePolicy(FALLBACK.route_id, 300, limits.pop("max_hedges", 1), 10, 1)
    policy = replace(
        reference_policy(),
        hedging=hedging,
        routes=(PRIMARY, replace(FALLBACK, max_attempts=2)),
        **limits,
    )
    step = hedge_step(
        policy,
        reference_admission(),
        first_start_ms=1_000,
        group_reserved_micros=PRIMARY.max_attempt_cost_micros
        + hedges_so_far * FALLBACK.max_attempt_cost_micros,
        hedges_so_far=hedges_so_far,
    )
    assert (step is not None) is planned


def test_a_poll_due_at_the_deadline_is_not_made() -> None:
    polling = PollPolicy(interval_ms=1_000, max_polls=3)

    def at(deadline: int, polls: int = 0) -> int | None:
        return next_poll_ms(
            polling,
            polls_done=polls,
            last_poll_ms=1_000,
            deadline_ms=deadline,
            retry_after_ms=None,
            max_retry_after_ms=2_000,
        )

    assert at(2_000) is None
    assert at(2_001) == 2_000
    assert at(9_000, polls=3) is None  # the poll budget
    assert at(9_000, polls=2) == 2_000


# --- the first exceeded budget wins -------------------------------------------------------------
def test_each_budget_holds_exactly_at_its_bound() -> None:
    policy = reference_policy()
    admitted = evaluate(replace(policy, max_total_attempts=2), reference_admission(), ATTEMPTS[:1])
    assert admitted.terminal is None  # one attempt made of two
    spent = evaluate(policy, reference_admission(), ATTEMPTS[:1]).spent_micros
    exact = replace(policy, max_total_cost_micros=spent + PRIMARY.max_attempt_cost_micros)
    assert evaluate(exact, reference_admission(), ATTEMPTS[:1]).terminal is None
    over = replace(exact, max_total_cost_micros=exact.max_total_cost_micros - 1)
    assert evaluate(over, reference_admission(), ATTEMPTS[:1]).terminal is Terminal.STOP_COST_BUDGET
    assert (
        evaluate(
            replace(policy, max_total_attempts=1), reference_admission(), ATTEMPTS[:1]
        ).terminal
        is Terminal.STOP_ATTEMPT_BUDGET
    )


@pytest.mark.parametrize(
    ("max_attempts", "terminal"),
    [
        (3, Terminal.STOP_ATTEMPT_BUDGET),  # attempts and routes both exhausted: attempts
        (4, Terminal.STOP_ROUTE_EXHAUSTED),  # only the routes
    ],
)
def test_attempts_are_checked_before_the_routes(max_attempts: int, terminal: Terminal) -> None:
    exhausted = replace(
        ATTEMPTS[2], outcome=Outcome.RETRYABLE, outcome_kind=OutcomeKind.UNAVAILABLE
    )
    policy = replace(reference_policy(), max_total_attempts=max_attempts)
    receipt = evaluate(policy, reference_admission(), (*ATTEMPTS[:2], exhausted))
    assert receipt.terminal is terminal


@pytest.mark.parametrize(
    ("max_attempts", "max_cost", "deadline", "terminal"),
    [
        (1, 200_000, 1_350, Terminal.STOP_ATTEMPT_BUDGET),  # attempts, cost, deadline: attempts
        (4, 349_999, 1_350, Terminal.STOP_COST_BUDGET),  # cost and deadline exceeded: cost
        (4, 350_000, 1_350, Terminal.STOP_DEADLINE),  # the cost fits exactly: the deadline
        (4, 350_000, 1_351, None),  # everything fits: retry at 1,350 ms
    ],
)
def test_the_first_exceeded_budget_decides_a_retry(
    max_attempts: int, max_cost: int, deadline: int, terminal: Terminal | None
) -> None:
    """After attempt 1 (150,000 spent) the retry would reserve 200,000 and start at 1,350 ms."""
    policy = replace(
        reference_policy(), max_total_attempts=max_attempts, max_total_cost_micros=max_cost
    )
    receipt = evaluate(policy, reference_admission(deadline), ATTEMPTS[:1])
    assert receipt.terminal is terminal


# --- a Retry-After equal to the cap -----------------------------------------------------------
def test_a_retry_after_equal_to_the_cap_is_honoured_in_full_and_not_flagged() -> None:
    cap = reference_policy().max_retry_after_ms  # 2,000 ms
    assert bounded_hint_ms(cap, cap) == cap
    assert bounded_hint_ms(cap + 1, cap) == cap
    assert retry_delay_ms(reference_policy(), 1, cap) == cap
    exact = parse_retry_after("2", now_ms=0, cap_ms=2_000)
    assert (exact.delay_ms, exact.capped) == (2_000, False)
    over = parse_retry_after("3", now_ms=0, cap_ms=2_000)
    assert (over.delay_ms, over.capped) == (2_000, True)
    hinted = replace(ATTEMPTS[0], retry_after_ms=cap)
    plan = evaluate(reference_policy(), reference_admission(), (hinted,)).next_attempt
    assert plan is not None
    assert (plan.delay_ms, plan.not_before_ms, plan.retry_after_ms) == (cap, 1_100 + cap, cap)


# --- an attempt's reservation -------------------------------------------------------------------
def test_an_attempt_may_cost_exactly_its_reservation() -> None:
    reserve = PRIMARY.max_attempt_cost_micros
    exact = replace(ATTEMPTS[0], cost_actual_micros=reserve)
    assert evaluate(reference_policy(), reference_admission(), (exact,)).spent_micros == reserve
    over = replace(exact, cost_actual_micros=reserve + 1)
    with pytest.raises(CostMismatch) as err:
        evaluate(reference_policy(), reference_admission(), (over,))
    assert err.value.field == "attempts[0].cost_actual_micros"


# --- a hedge races what is still in flight -------------------------------------------------------
HEDGED = replace(reference_policy(), hedging=HedgePolicy(FALLBACK.route_id, 300, 1, 10, 1))
"""The primary starts at 1,000 ms, so its hedge is due at 1,300 ms."""


def _hedge(**kw: Any) -> ObservedAttempt:
    return replace(
        ATTEMPTS[2],
        attempt_ordinal=2,
        start_ms=1_300,
        end_ms=1_500,
        not_before_ms=1_300,
        backoff_delay_ms=None,
        hedge_ordinal=1,
        **kw,
    )


def _primary(end_ms: int, outcome: Outcome, **kw: Any) -> ObservedAttempt:
    kind = None if outcome is Outcome.SUCCESS else OutcomeKind.UNAVAILABLE
    return replace(
        ATTEMPTS[0],
        end_ms=end_ms,
        outcome=outcome,
        outcome_kind=kind,
        retry_after_ms=None,
        cost_actual_micros=None,
        hedge_ordinal=0,
        **kw,
    )


def test_a_hedge_started_in_the_ms_the_race_was_won_is_a_late_loser() -> None:
    race = (
        _primary(1_300, Outcome.SUCCESS, hedge_result=HedgeResult.WINNER),
        _hedge(hedge_result=HedgeResult.LATE),
    )
    receipt = evaluate(HEDGED, reference_admission(), race)
    assert receipt.terminal is Terminal.COMPLETE
    won_before = (replace(race[0], end_ms=1_299), race[1])
    with pytest.raises(HedgeRejected, match="already won") as err:
        evaluate(HEDGED, reference_admission(), won_before)
    assert err.value.field == "attempts[1].start_ms"


def test_a_hedge_started_in_the_ms_its_primary_failed_still_races_it() -> None:
    race = (_primary(1_300, Outcome.RETRYABLE), _hedge(hedge_result=HedgeResult.WINNER))
    assert evaluate(HEDGED, reference_admission(), race).terminal is Terminal.COMPLETE
    ended_before = (replace(race[0], end_ms=1_299), race[1])
    with pytest.raises(HedgeRejected, match="a retry") as err:
        evaluate(HEDGED, reference_admission(), ended_before)
    assert err.value.field == "attempts[1].start_ms"
