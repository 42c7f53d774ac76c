"""Schedule figures, the evaluator's decisions and terminals, receipts and replay."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.control import _evaluator as ev
from retryscope.control._lab import (
    FALLBACK,
    PRIMARY,
    reference_admission,
    reference_attempts,
    reference_policy,
)
from retryscope.control._policy import Admission, Jitter, RetryPolicy
from retryscope.control._receipts import (
    attempts_sha256,
    policy_sha256,
    receipt_json,
    receipt_sha256,
    replay,
)
from retryscope.control._schedule import (
    exponential_delay_ms,
    jitter_draw,
    next_step,
    retry_delay_ms,
)
from retryscope.control._strict import to_obj
from retryscope.vocabulary import Decision, Outcome, OutcomeKind, Terminal

ATTEMPTS = reference_attempts()
ADMISSION = reference_admission()


def evaluate(
    policy: RetryPolicy,
    attempts: tuple[ev.ObservedAttempt, ...] | list[ev.ObservedAttempt],
    *,
    deadline_ms: int | None = None,
    **kw: int,
) -> ev.Receipt:
    """The evaluator on the lab's request (with another deadline when given)."""
    admission = ADMISSION if deadline_ms is None else reference_admission(deadline_ms)
    return ev.evaluate(policy, admission, attempts, **kw)  # type: ignore[arg-type]


def test_the_issue_schedule_figures_come_out_exactly() -> None:
    assert [exponential_delay_ms(200, 1_500, n) for n in range(1, 6)] == [200, 400, 800, 1500, 1500]
    assert retry_delay_ms(reference_policy(), 2, 1_200) == 1_200
    assert retry_delay_ms(reference_policy(), 2, None) == 400
    capped = replace(reference_policy(), max_retry_after_ms=300)
    assert retry_delay_ms(capped, 1, 10_000) == 300  # the hint is bounded by the policy


def test_reference_sequence_retries_then_falls_back_at_the_exact_times() -> None:
    receipt = evaluate(reference_policy(), ATTEMPTS)
    assert [d.decision for d in receipt.decisions] == [
        Decision.RETRY,
        Decision.FALLBACK,
        Decision.COMPLETE,
    ]
    assert [d.next_not_before_ms for d in receipt.decisions] == [1_350, 1_650, None]
    assert [d.next_route_id for d in receipt.decisions[:2]] == [
        "private-primary",
        "external-fallback",
    ]
    assert receipt.terminal is Terminal.COMPLETE
    assert (
        receipt.spent_micros == 150_000 + 200_000 + 250_000
    )  # unknown usage keeps the reservation


def test_same_route_retry_plans_the_next_ordinal() -> None:
    receipt = evaluate(reference_policy(), ATTEMPTS[:1])
    plan = receipt.next_attempt
    assert plan is not None
    assert receipt.terminal is None
    assert (plan.route, plan.attempt_ordinal, plan.route_attempt_ordinal) == (PRIMARY, 2, 1 + 1)
    assert (plan.delay_ms, plan.not_before_ms, plan.retry_after_ms) == (250, 1_350, 250)


@pytest.mark.parametrize(
    ("attempts", "error", "field"),
    [
        (
            (replace(ATTEMPTS[0], route_id="shadow-route"),),
            ev.RouteMismatch,
            "attempts[0].route_id",
        ),
        (
            (replace(ATTEMPTS[0], route_release="f" * 64),),
            ev.ReleaseMismatch,
            "attempts[0].route_release",
        ),
        (
            (replace(ATTEMPTS[0], attempt_ordinal=2),),
            ev.OrdinalMismatch,
            "attempts[0].attempt_ordinal",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], route_attempt_ordinal=1)),
            ev.OrdinalMismatch,
            "attempts[1].route_attempt_ordinal",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], idempotency_digest="0" * 64)),
            ev.IdempotencyDrift,
            "attempts[1].idempotency_digest",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], logical_request_digest="0" * 64)),
            ev.RequestDrift,
            "attempts[1].logical_request_digest",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], start_ms=1_349)),
            ev.EarlyStart,
            "attempts[1].start_ms",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], backoff_delay_ms=200)),
            ev.JitterOutOfRange,
            "attempts[1].backoff_delay_ms",
        ),
        (
            (ATTEMPTS[0], replace(ATTEMPTS[1], not_before_ms=1_300)),
            ev.ScheduleDrift,
            "attempts[1].not_before_ms",
        ),
        (
            (replace(ATTEMPTS[0], cost_actual_micros=200_001),),
            ev.CostMismatch,
            "attempts[0].cost_actual_micros",
        ),
        (
            (replace(ATTEMPTS[0], cost_reserved_micros=1),),
            ev.CostMismatch,
            "attempts[0].cost_reserved_micros",
        ),
        (
            (replace(ATTEMPTS[0], outcome_kind=OutcomeKind.REJECTED),),
            ev.InvalidObservation,
            "attempts[0].outcome_kind",
        ),
        (
            (replace(ATTEMPTS[0], start_ms=5_000, end_ms=5_100),),
            ev.DispatchAfterDeadline,
            "attempts[0].start_ms",
        ),
        ((ATTEMPTS[0], ATTEMPTS[2]), ev.RouteMismatch, "attempts[1].route_id"),
    ],
)
def test_an_attempt_the_policy_did_not_plan_is_rejected_by_field(
    attempts: tuple[ev.ObservedAttempt, ...], error: type[ev.AttemptRejected], field: str
) -> None:
    with pytest.raises(error) as err:
        evaluate(reference_policy(), attempts)
    assert err.value.field == field


def _fail(a: ev.ObservedAttempt, kind: OutcomeKind) -> ev.ObservedAttempt:
    return replace(a, outcome=kind.family, outcome_kind=kind, retry_after_ms=None)


@pytest.mark.parametrize(
    ("policy", "attempts", "terminal", "deadline"),
    [
        (reference_policy(), ATTEMPTS, Terminal.COMPLETE, None),
        (
            reference_policy(),
            (_fail(ATTEMPTS[0], OutcomeKind.POLICY_DENIED),),
            Terminal.STOP_NON_RETRYABLE,
            None,
        ),
        (
            reference_policy(),
            (_fail(ATTEMPTS[0], OutcomeKind.INVALID_OUTPUT),),
            Terminal.STOP_NON_RETRYABLE,
            None,
        ),
        (
            reference_policy(),
            (_fail(ATTEMPTS[0], OutcomeKind.STREAM_INTERRUPTED_AFTER_OUTPUT),),
            Terminal.STOP_INDETERMINATE,
            None,
        ),
        (
            replace(reference_policy(), max_total_attempts=1),
            ATTEMPTS[:1],
            Terminal.STOP_ATTEMPT_BUDGET,
            None,
        ),
        (
            replace(reference_policy(), max_total_cost_micros=649_999),
            ATTEMPTS[:2],
            Terminal.STOP_COST_BUDGET,
            None,
        ),
        (
            replace(reference_policy(), max_total_cost_micros=100),
            (),
            Terminal.STOP_COST_BUDGET,
            None,
        ),
        (reference_policy(), ATTEMPTS[:1], Terminal.STOP_DEADLINE, 1_350),
        (reference_policy(), ATTEMPTS, Terminal.STOP_DEADLINE, 1_900),
        (
            reference_policy(),
            (*ATTEMPTS[:2], _fail(ATTEMPTS[2], OutcomeKind.TIMEOUT_BEFORE_RESPONSE)),
            Terminal.STOP_ROUTE_EXHAUSTED,
            None,
        ),
    ],
)
def test_every_terminal(
    policy: RetryPolicy,
    attempts: tuple[ev.ObservedAttempt, ...],
    terminal: Terminal,
    deadline: int | None,
) -> None:
    receipt = evaluate(policy, attempts, deadline_ms=deadline)
    assert receipt.terminal is terminal
    assert receipt.next_attempt is None
    if attempts:
        assert receipt.decisions[-1].terminal is terminal


def test_a_success_at_the_deadline_loses_and_the_wait_past_it_stops() -> None:
    late = evaluate(reference_policy(), ATTEMPTS, deadline_ms=1_900)
    assert (late.terminal, late.decisions[-1].decision) == (Terminal.STOP_DEADLINE, Decision.STOP)
    waiting = evaluate(reference_policy(), ATTEMPTS[:1], now_ms=5_000)
    assert waiting.terminal is Terminal.STOP_DEADLINE


def test_any_attempt_after_a_terminal_is_rejected() -> None:
    stopped = (_fail(ATTEMPTS[0], OutcomeKind.REJECTED), *ATTEMPTS[1:])
    with pytest.raises(ev.PostTerminalAttempt) as err:
        evaluate(reference_policy(), stopped)
    assert err.value.field == "attempts[1]"
    with pytest.raises(ev.PostTerminalAttempt):
        evaluate(reference_policy(), (*ATTEMPTS, replace(ATTEMPTS[2], attempt_ordinal=4)))


def test_jitter_is_replayable_and_checked() -> None:
    jittered = replace(reference_policy(), jitter=Jitter("scheduler-2026.11", 7))
    steps = [
        next_step(
            jittered,
            ADMISSION,
            failed_route=PRIMARY,
            used={PRIMARY.route_id: 1},
            next_attempt_ordinal=2,
            completed_at_ms=1_100,
            retry_after_ms=100,
        )
        for _ in range(2)
    ]
    step = steps[0]
    assert step is not None
    assert steps[1] == step  # same release, seed and attempt: same draw
    assert (step.delay_low_ms, step.delay_high_ms) == (100, 200)
    assert 100 <= step.delay_ms <= 200
    draws = {
        jitter_draw(
            Jitter("scheduler-2026.11", s),
            idempotency_sha256="a" * 64,
            attempt_ordinal=2,
            low=0,
            high=10_000,
        )
        for s in range(20)
    }
    assert len(draws) > 10  # the seed matters
    first = replace(ATTEMPTS[0], retry_after_ms=100)
    second = replace(
        ATTEMPTS[1],
        backoff_delay_ms=step.delay_ms,
        not_before_ms=step.not_before_ms,
        start_ms=step.not_before_ms,
        end_ms=step.not_before_ms + 10,
        outcome=Outcome.SUCCESS,
        outcome_kind=None,
    )
    assert evaluate(jittered, (first, second)).terminal is Terminal.COMPLETE
    with pytest.raises(ev.JitterOutOfRange):  # below the Retry-After hint
        evaluate(jittered, (first, replace(second, backoff_delay_ms=99)))
    with pytest.raises(ev.JitterOutOfRange):  # beyond the capped delay
        evaluate(jittered, (first, replace(second, backoff_delay_ms=201)))
    other = 100 if step.delay_ms != 100 else 101
    with pytest.raises(ev.ScheduleDrift):  # inside the window but not the seeded draw
        evaluate(jittered, (first, replace(second, backoff_delay_ms=other)))
    assert evaluate(jittered, (first,), deadline_ms=step.not_before_ms).terminal is (
        Terminal.STOP_DEADLINE
    )


def test_receipt_digests_and_clean_replay() -> None:
    receipt = evaluate(reference_policy(), ATTEMPTS)
    raw = receipt_json(receipt)
    obj = json.loads(raw)
    assert obj["policy_sha256"] == policy_sha256(reference_policy())
    assert obj["attempts_sha256"] == attempts_sha256(ATTEMPTS)
    report = replay(raw)
    assert report.ok
    assert report.recomputed_sha256 == receipt_sha256(receipt) == report.recorded_sha256


def _mutated(path: list[str | int], value: object) -> bytes:
    obj = json.loads(receipt_json(evaluate(reference_policy(), ATTEMPTS)))
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("path", "value", "fields"),
    [
        (["terminal"], "stop_deadline", {"$.terminal"}),
        (["decisions", 0, "next_delay_ms"], 200, {"$.decisions[0].next_delay_ms"}),
        (["decisions", 1, "decision"], "retry", {"$.decisions[1].decision"}),
        (["spent_micros"], 1, {"$.spent_micros"}),
        (["policy_sha256"], "0" * 64, {"$.policy_sha256"}),
        (["policy", "max_total_cost_micros"], 2_000_000, {"$.policy_sha256"}),
        (
            ["attempts", 2, "cost_actual_micros"],
            260_000,
            {"$.attempts_sha256", "$.decisions[2].spent_micros", "$.spent_micros"},
        ),
    ],
)
def test_replay_reports_receipt_mutation_field_by_field(
    path: list[str | int], value: object, fields: set[str]
) -> None:
    report = replay(_mutated(path, value))
    assert not report.ok
    assert {d.field for d in report.drift} == fields


def test_replay_reports_a_spliced_attempt_as_an_evaluation_error() -> None:
    report = replay(_mutated(["attempts", 1, "route_id"], "external-fallback"))
    assert report.error is not None
    assert report.error.startswith("RouteMismatch")


def test_attempts_convert_from_parquet_rows() -> None:
    def row(a: ev.ObservedAttempt, retry_after: int | None) -> dict[str, object]:
        """The ``attempts`` view's columns: timestamps in ns, the hint one row later."""
        obj = to_obj(a)
        nb = obj.pop("not_before_ms")
        obj.update(
            start_time=obj.pop("start_ms") * 1_000_000 + 999_999,  # floors to the ms
            end_time=obj.pop("end_ms") * 1_000_000,
            not_before=None if nb is None else nb * 1_000_000,
            retry_after_ms=retry_after,
        )
        return obj

    rows = [row(ATTEMPTS[2], None), row(ATTEMPTS[0], None), row(ATTEMPTS[1], 250)]
    assert ev.attempts_from_rows(rows) == ATTEMPTS
    from datetime import UTC, datetime

    dated = dict(rows[1], start_time=datetime.fromtimestamp(1.0, UTC))
    assert ev.attempt_from_row(dated, retry_after_ms=250).start_ms == 1_000


# --- properties ----------------------------------------------------------------------------
policies = st.builds(
    lambda base, cap, hint_cap, total, cost, deadline, a0, a1, jitter: (
        replace(
            reference_policy(),
            base_backoff_ms=min(base, cap),
            max_backoff_ms=cap,
            max_retry_after_ms=hint_cap,
            max_total_attempts=total,
            max_total_cost_micros=cost,
            routes=(replace(PRIMARY, max_attempts=a0), replace(FALLBACK, max_attempts=a1)),
            jitter=jitter,
        ),
        reference_admission(deadline),
    ),
    st.integers(0, 2_000),
    st.integers(0, 5_000),
    st.integers(0, 5_000),
    st.integers(1, 8),
    st.integers(0, 3_000_000),
    st.integers(1_000, 60_000),
    st.integers(1, 5),
    st.integers(1, 5),
    st.none() | st.builds(Jitter, st.just("sched-1"), st.integers(0, 2**32)),
)
observations = st.lists(
    st.tuples(
        st.sampled_from([*OutcomeKind, None]),
        st.integers(0, 3_000),  # duration
        st.integers(0, 500),  # extra wait after not_before
        st.none() | st.integers(0, 100_000),  # Retry-After received
        st.none() | st.integers(0, 400_000),  # actual cost
    ),
    max_size=12,
)


def _drive(
    policy: RetryPolicy,
    admission: Admission,
    script: list[tuple],  # type: ignore[type-arg]
) -> list[ev.Receipt]:
    """A compliant harness: follows each plan, observing the scripted outcomes."""
    attempts: list[ev.ObservedAttempt] = []
    receipts = [ev.evaluate(policy, admission, attempts)]
    for kind, duration, wait, hint, actual in script:
        plan = receipts[-1].next_attempt
        if receipts[-1].terminal is not None or plan is None:
            break
        start = max(1_000, plan.not_before_ms or 0) + wait
        if start >= admission.deadline_ms:
            break
        attempts.append(
            ev.ObservedAttempt(
                route_id=plan.route.route_id,
                route_release=plan.route.route_release_sha256,
                route_attempt_ordinal=plan.route_attempt_ordinal,
                attempt_ordinal=plan.attempt_ordinal,
                logical_request_digest=admission.logical_request_sha256,
                idempotency_digest=admission.idempotency_key_sha256,
                start_ms=start,
                end_ms=start + duration,
                outcome=Outcome.SUCCESS if kind is None else kind.family,
                outcome_kind=kind,
                not_before_ms=plan.not_before_ms,
                backoff_delay_ms=plan.delay_ms,
                retry_after_ms=hint,
                cost_reserved_micros=plan.reserve_micros,
                cost_actual_micros=None if actual is None else min(actual, plan.reserve_micros),
            )
        )
        receipts.append(ev.evaluate(policy, admission, attempts))
    return receipts


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 3_000),
    st.integers(0, 3_000),
    st.integers(1, 70),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
)
def test_schedule_is_monotone_and_capped(
    base: int, cap: int, n: int, hint: int, hint_cap: int
) -> None:
    base = min(base, cap)
    d = exponential_delay_ms(base, cap, n)
    assert d <= cap
    assert d <= exponential_delay_ms(base, cap, n + 1)
    policy = replace(
        reference_policy(), base_backoff_ms=base, max_backoff_ms=cap, max_retry_after_ms=hint_cap
    )
    assert retry_delay_ms(policy, n, hint) == max(d, min(hint, hint_cap))
    assert retry_delay_ms(policy, n, hint) <= max(cap, hint_cap)


@settings(max_examples=200, deadline=None)
@given(policies, observations)
def test_budgets_deadline_and_not_before_hold_for_any_compliant_run(
    bound: tuple[RetryPolicy, Admission],
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    policy, admission = bound
    receipts = _drive(policy, admission, script)
    final = receipts[-1]
    assert len(final.attempts) <= policy.max_total_attempts
    for route in policy.routes:
        assert sum(1 for a in final.attempts if a.route_id == route.route_id) <= route.max_attempts
    assert final.spent_micros <= policy.max_total_cost_micros
    for a in final.attempts:
        assert a.not_before_ms is None or a.start_ms >= a.not_before_ms
        assert a.start_ms < admission.deadline_ms  # the deadline is absolute, never reset
    for r in receipts:
        assert r.admission.deadline_ms == admission.deadline_ms
        if r.next_attempt is not None and r.next_attempt.not_before_ms is not None:
            assert r.next_attempt.not_before_ms < admission.deadline_ms
    if final.terminal is not None and final.attempts:
        with pytest.raises(ev.PostTerminalAttempt):
            ev.evaluate(policy, admission, [*final.attempts, final.attempts[-1]])
    if len(final.attempts) >= 2 and final.attempts[1].not_before_ms is not None:
        early = replace(final.attempts[1], start_ms=final.attempts[1].not_before_ms - 1)
        with pytest.raises(ev.EarlyStart):
            ev.evaluate(policy, admission, [final.attempts[0], early])
