"""A forked child's shared guards: a lock another thread held at the fork does not hang
the child, the parent's requests, dispatches and probes in flight do not hold the child's
budget slots or half-open breaker, and what the breakers learnt stays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PARENT = r"""
import json, os, sys, threading, time
from dataclasses import replace
from retryscope.instrumentation.control._guards import GuardKind
from retryscope.instrumentation.control._lab import reference_policy
from retryscope.instrumentation.control._policy import CircuitBreakerPolicy, RetryBudgetPolicy
from retryscope.instrumentation.control._shared import SharedState

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
held, release = threading.Event(), threading.Event()
def holding():
    with shared._lock:
        held.set()
        release.wait()
thread = threading.Thread(target=holding)
thread.start()
held.wait()
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
release.set()
thread.join()
deadline, child = time.monotonic() + float(sys.argv[1]), "hung"
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        child = os.waitstatus_to_exitcode(status)
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "child": child}))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_guards_its_own_requests(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    done = subprocess.run(
        [sys.executable, str(script), "30"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the parent refuses both (its slot and its probe are taken); the child admits its own
    assert result == {"parent": {"retry": False, "probe": False}, "child": 0}, done.stderr
