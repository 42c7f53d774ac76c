"""The shared guards as pure state machines: every rule at its boundary, time as an argument."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.control._guards import (
    BudgetLevel,
    BudgetLimits,
    BudgetState,
    CircuitState,
    GuardKind,
    Ticket,
    breaker_admit,
    breaker_record,
    budget_admit,
    budget_limit,
    budget_release,
    budget_request,
)
from retryscope.control._lab import reference_policy
from retryscope.control._policy import CircuitBreakerPolicy, RetryBudgetPolicy
from retryscope.control._shared import SharedState
from retryscope.vocabulary import BreakerState

RETRY = GuardKind.RETRY_BUDGET
CFG = CircuitBreakerPolicy(
    failure_percent=50,
    minimum_throughput=4,
    sampling_duration_ms=10_000,
    break_duration_ms=5_000,
    half_open_probes=2,
)


def _budget(limits: BudgetLimits, requests: int, in_flight: int) -> BudgetState:
    s = BudgetState()
    for _ in range(requests):
        s = budget_request(limits, s, 1)
    for _ in range(in_flight):
        s, admitted, _ = budget_admit(limits, s, RETRY, 0)
        assert admitted
    return s


def test_the_retry_budget_admits_below_its_limit_and_refuses_at_it() -> None:
    limits = BudgetLimits(percent=20, minimum=1)
    assert budget_limit(limits, _budget(limits, 10, 0)) == 2  # 20 % of 10 in flight
    below = _budget(limits, 10, 1)
    _, admitted, snap = budget_admit(limits, below, RETRY, 7)
    assert admitted
    assert (snap.state, snap.tokens, snap.at_ms) == ("available", 1, 7)
    at_limit = _budget(limits, 10, 2)
    same, refused, snap = budget_admit(limits, at_limit, RETRY, 8)
    assert not refused
    assert same == at_limit  # a refusal changes nothing
    assert (snap.state, snap.tokens) == ("exhausted", 0)


def test_the_minimum_concurrency_holds_however_few_requests_fly() -> None:
    limits = BudgetLimits(percent=20, minimum=3)
    assert budget_limit(limits, _budget(limits, 1, 0)) == 3
    s = _budget(limits, 1, 2)
    s, admitted, _ = budget_admit(limits, s, RETRY, 0)
    assert admitted
    _, admitted, _ = budget_admit(limits, s, RETRY, 0)
    assert not admitted


def test_the_budget_generation_counts_its_level_changes() -> None:
    limits = BudgetLimits(percent=0, minimum=1)
    s = budget_request(limits, BudgetState(), 1)
    assert (s.level, s.generation) == (BudgetLevel.AVAILABLE, 0)
    s, _, _ = budget_admit(limits, s, RETRY, 0)
    assert (s.level, s.generation) == (BudgetLevel.EXHAUSTED, 1)
    s = budget_release(limits, s)
    assert (s.level, s.generation) == (BudgetLevel.AVAILABLE, 2)
    assert budget_release(limits, s) == s  # releasing below zero is ignored


def _record(s: CircuitState, at: int, *failed: bool) -> CircuitState:
    for f in failed:
        s, ticket, _ = breaker_admit(CFG, s, "r", at)
        assert ticket is not None
        s = breaker_record(CFG, s, ticket, f, at)
    return s


def test_the_breaker_opens_exactly_at_the_failure_share_and_throughput() -> None:
    half = _record(CircuitState(), 100, True, False, True, False)  # 2 of 4 failed: 50 %
    assert (half.state, half.generation, half.opened_at_ms) == (BreakerState.OPEN, 1, 100)
    below = _record(CircuitState(), 100, True, False, False, False, False)  # 1 of 5: 20 %
    assert below.state is BreakerState.CLOSED
    three = _record(CircuitState(), 100, True, True, True)  # all failed, 3 < 4 outcomes
    assert three.state is BreakerState.CLOSED
    assert _record(three, 100, False).state is BreakerState.OPEN  # the 4th makes it (3 of 4)


def test_outcomes_leave_the_window_after_the_sampling_duration() -> None:
    old = _record(CircuitState(), 0, True, True, True)
    # a bucket starting at 0 still counts at 9,999 ms and no longer at 10,000 ms
    assert _record(old, 9_999, True).state is BreakerState.OPEN
    assert _record(old, 10_000, True).state is BreakerState.CLOSED


def test_an_open_breaker_turns_half_open_exactly_after_its_break() -> None:
    opened = _record(CircuitState(), 100, True, True, True, True)
    s, ticket, snap = breaker_admit(CFG, opened, "r", 5_099)
    assert ticket is None
    assert (snap.state, snap.tokens) == ("open", 0)
    s, ticket, snap = breaker_admit(CFG, s, "r", 5_100)
    assert ticket == Ticket(generation=2, probe=True)
    assert (snap.state, snap.generation, snap.tokens) == ("half_open", 2, 2)


def test_half_open_admits_a_bounded_number_of_probes() -> None:
    s, _, _ = breaker_admit(CFG, _record(CircuitState(), 0, *[True] * 4), "r", 5_000)
    s, second, snap = breaker_admit(CFG, s, "r", 5_001)
    assert second is not None
    assert snap.tokens == 1
    s, third, snap = breaker_admit(CFG, s, "r", 5_002)
    assert third is None
    assert (snap.state, snap.tokens) == ("half_open", 0)
    s = breaker_record(CFG, s, second, None, 5_003)  # a cancelled probe frees its slot
    assert s.state is BreakerState.HALF_OPEN
    _, again, _ = breaker_admit(CFG, s, "r", 5_004)
    assert again is not None


@pytest.mark.parametrize(
    ("failed", "state"), [(False, BreakerState.CLOSED), (True, BreakerState.OPEN)]
)
def test_a_probe_closes_or_reopens_the_breaker(failed: bool, state: BreakerState) -> None:
    s, probe, _ = breaker_admit(CFG, _record(CircuitState(), 0, *[True] * 4), "r", 5_000)
    assert probe is not None
    after = breaker_record(CFG, s, probe, failed, 6_000)
    assert (after.state, after.generation) == (state, 3)
    assert after.opened_at_ms == (6_000 if failed else 0)


def test_a_result_from_before_the_last_change_cannot_move_the_breaker() -> None:
    s, stale, _ = breaker_admit(CFG, CircuitState(), "r", 0)  # admitted while closed
    assert stale is not None
    opened = _record(s, 10, *[True] * 4)
    assert breaker_record(CFG, opened, stale, False, 20) == opened


def test_a_probe_outliving_its_generation_cannot_close_a_reopened_breaker() -> None:
    s, first, _ = breaker_admit(CFG, _record(CircuitState(), 0, *[True] * 4), "r", 5_000)
    s, second, _ = breaker_admit(CFG, s, "r", 5_001)
    assert first is not None
    assert second is not None
    reopened = breaker_record(CFG, s, first, True, 5_002)
    assert (reopened.state, reopened.generation) == (BreakerState.OPEN, 3)
    assert breaker_record(CFG, reopened, second, False, 5_003) == reopened


def test_a_failure_admitted_before_the_breaker_opened_is_not_counted_after_it_closed() -> None:
    s, stale, _ = breaker_admit(CFG, CircuitState(), "r", 0)
    assert stale is not None
    s, probe, _ = breaker_admit(CFG, _record(s, 0, *[True] * 4), "r", 5_000)
    assert probe is not None
    closed = breaker_record(CFG, s, probe, False, 5_001)
    assert (closed.state, closed.buckets) == (BreakerState.CLOSED, ())
    assert breaker_record(CFG, closed, stale, True, 5_002) == closed


def test_shared_state_serves_many_requests_and_reports_none_without_a_guard() -> None:
    plain = SharedState(reference_policy())
    assert plain.admit(RETRY, 2, "private-primary", 0) is None
    assert plain.admit(GuardKind.BREAKER, 1, "private-primary", 0) is None
    policy = replace(
        reference_policy(),
        retry_budget=RetryBudgetPolicy(budget_percent=50, min_retry_concurrency=0),
        circuit_breaker=CFG,
    )
    shared = SharedState(policy)
    for _ in range(4):
        shared.request_started()
    passes = []
    for ordinal in (2, 2, 2):
        answer = shared.admit(RETRY, ordinal, "private-primary", 0)
        assert answer is not None
        passes.append(answer[1])
    assert [p is not None for p in passes] == [True, True, False]  # 50 % of 4
    assert passes[0] is not None
    shared.release(passes[0], failed=None, now_ms=1)
    snap = shared.snapshot(RETRY, "retry_budget", 2)
    assert snap is not None
    assert snap.tokens == 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["admit", "ok", "fail", "cancel"]), st.integers(0, 400)),
        max_size=60,
    )
)
def test_the_breaker_never_exceeds_its_probes_and_generations_only_grow(
    ops: list[tuple[str, int]],
) -> None:
    s, now, tickets, generation = CircuitState(), 0, [], 0
    for op, dt in ops:
        now += dt * 50
        if op == "admit":
            s, ticket, snap = breaker_admit(CFG, s, "r", now)
            assert (ticket is None) == (
                snap.state == "open" or (snap.tokens == 0 and snap.state == "half_open")
            )
            if ticket is not None:
                tickets.append(ticket)
        elif tickets:
            ticket = tickets.pop(0)
            s = breaker_record(CFG, s, ticket, {"ok": False, "fail": True}.get(op), now)
        assert 0 <= s.probes <= CFG.half_open_probes
        assert s.generation >= generation
        generation = s.generation
        if s.state is not BreakerState.CLOSED:
            assert s.buckets == ()
