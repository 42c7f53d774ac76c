"""A forked child's shared guards: a lock another thread held at the fork does not hang
the child, the parent's requests, dispatches and probes in flight do not hold the child's
budget slots or half-open breaker, and what the breakers learnt stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.forking import FORK_HELPERS, run_parent

PARENT = (
    r"""
import json, os, sys, threading, time
"""
    + FORK_HELPERS
    + r"""
from dataclasses import replace
from retryscope.control._guards import GuardKind
from retryscope.control._lab import reference_policy
from retryscope.control._policy import CircuitBreakerPolicy, RetryBudgetPolicy
from retryscope.control._shared import SharedState

RETRY, BREAKER, ROUTE = GuardKind.RETRY_BUDGET, GuardKind.BREAKER, "private-primary"
breaker = CircuitBreakerPolicy(failure_percent=50, minimum_throughput=4,
                               sampling_duration_ms=10_000, break_duration_ms=5_000,
                               half_open_probes=1)
policy = replace(reference_policy(), circuit_breaker=breaker,
                 retry_budget=RetryBudgetPolicy(budget_percent=50, min_retry_concurrency=1))
shared = SharedState(policy)
# the parent's other threads: two requests in flight, one retry dispatched (the budget's
# one slot: 50 % of 2), the route's breaker opened by four failures, half-open since, with
# its one probe out
shared.request_started()
shared.request_started()
assert shared.admit(RETRY, 2, ROUTE, 0)[1] is not None
for now in range(4):
    shared.release(shared.admit(BREAKER, 1, ROUTE, now)[1], failed=True, now_ms=now)
assert shared.admit(BREAKER, 1, ROUTE, 6_000)[1] is not None
parent = {"retry": shared.admit(RETRY, 2, ROUTE, 6_001)[1] is not None,
          "probe": shared.admit(BREAKER, 1, ROUTE, 6_001)[1] is not None}
# and one of them holds the lock while the main thread forks
let_go = held_by_another_thread([shared._lock])
pid = os.fork()
if pid == 0:
    try:
        shared.request_started()
        retry = shared.admit(RETRY, 2, ROUTE, 7_000)[1] is not None
        probe = shared.admit(BREAKER, 1, ROUTE, 7_000)[1] is not None
        state = shared.snapshot(BREAKER, ROUTE, 7_001).state
        os._exit(0 if (retry, probe, state) == (True, True, "half_open") else 3)
    except BaseException:
        os._exit(4)
let_go()
print(json.dumps({"parent": parent, "child": wait_for_child(pid, float(sys.argv[1]))}))
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_guards_its_own_requests(tmp_path: Path) -> None:
    result = run_parent(PARENT, tmp_path, "30", timeout=150)
    # the parent refuses both (its slot and its probe are taken); the child admits its own
    assert result == {"parent": {"retry": False, "probe": False}, "child": 0}
