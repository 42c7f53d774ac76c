"""What-if replay: exact figures on five requests run by the real controller (virtual clock).

a: 429 (Retry-After 250 ms, no usage billed: the 200,000 reservation counts), then success
   billed 100,000 → complete, 2 attempts.
b: 503, 503, fallback success billed 250,000 → complete, 3 attempts (starts at 2 s).
c: 503 ×3 → stop_route_exhausted (starts at 3 s).
e: 503 ×2 under a 2-attempt policy → stop_attempt_budget.
f: 503, 503, fallback success that ends 200 ms after the deadline → stop_deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import connect
from retryscope.analytics.replay._whatif import WhatIf, read_policy_file, whatif, whatif_requests
from retryscope.control._calls import CallResult
from retryscope.control._policy import policy_to_obj
from retryscope.vocabulary import OutcomeKind
from tests.whatif.harness import Traffic, policy_with

A, B, C, E, F = ("a" * 32, "b" * 32, "c" * 32, "e" * 32, "f" * 32)
METRICS = ("requests", "attempts", "cost_micros", "successes", "deadline_misses")


def _fail() -> CallResult:
    return CallResult(kind=OutcomeKind.UNAVAILABLE, cost_actual_micros=0)


def _ok(cost: int) -> CallResult:
    return CallResult(value="ok", cost_actual_micros=cost)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("whatif") / "data"
    t = Traffic(directory)
    limited = CallResult(kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250)
    assert t.controlled([(100, limited), (100, _ok(100_000))], request_id=A) == "complete"
    script = [(100, _fail()), (100, _fail()), (100, _ok(250_000))]
    assert t.controlled(script, request_id=B, start_ms=2_000) == "complete"
    script = [(100, _fail())] * 3
    assert t.controlled(script, request_id=C, start_ms=3_000) == "stop_route_exhausted"
    two = policy_with(max_total_attempts=2)
    assert t.controlled([(100, _fail())] * 2, request_id=E, policy=two) == "stop_attempt_budget"
    script = [(100, _fail()), (100, _fail()), (3_600, _ok(250_000))]
    assert t.controlled(script, request_id=F) == "stop_deadline"
    t.close()
    return directory


def _summary(data: Path, policy: WhatIf) -> dict[str, tuple[Any, Any, Any]]:
    con, _ = connect(data)
    rows = whatif(con, policy).to_pylist()
    return {r["metric"]: (r["recorded"], r["replayed_low"], r["replayed_high"]) for r in rows}


def _requests(data: Path, policy: WhatIf) -> dict[str, dict[str, Any]]:
    con, _ = connect(data)
    return {r["logical_request_id"]: r for r in whatif_requests(con, policy).to_pylist()}


RECORDED = {
    "requests": 5,
    "attempts": 13,
    "cost_micros": 800_000,
    "successes": 3,
    "deadline_misses": 1,
}


def test_replay_as_recorded_changes_nothing(data: Path) -> None:
    got = _summary(data, WhatIf())
    assert {m: got[m] for m in METRICS} == {m: (v, v, v) for m, v in RECORDED.items()}
    assert got["success_rate"] == (0.6, 0.6, 0.6)


@pytest.mark.parametrize(
    ("policy", "cut_by"),
    [(WhatIf(max_attempts=2), "attempts"), (WhatIf(no_fallback=True), "fallback")],
)
def test_fewer_attempts_or_no_fallback_cut_the_third_attempt(
    data: Path, policy: WhatIf, cut_by: str
) -> None:
    got = _summary(data, policy)
    assert got["attempts"] == (13, 10, 10)
    assert got["cost_micros"] == (800_000, 300_000, 300_000)
    assert got["successes"] == (3, 1, 1)
    assert got["deadline_misses"] == (1, 0, 0)  # f now stops at 1.6 s, before its deadline
    rows = _requests(data, policy)
    assert {k for k, r in rows.items() if r["cut_by"] == cut_by} == {B, C, F}
    assert {r["cut_at_attempt"] for r in rows.values() if r["cut_by"]} == {3}
    assert rows[B]["replayed_status"] == "failed"
    assert rows[A]["replayed_status"] == "success"


def test_retry_budget_admits_retries_in_start_order(data: Path) -> None:
    # one 10-minute window, 5 first attempts: floor(0.5 x 5) = 2 retries admitted, the
    # earliest (e and f at 1.3 s); a's retry at 1.35 s and every later one are denied
    rows = _requests(data, WhatIf(retry_budget=0.5, window_ms=600_000))
    assert {k: (r["cut_by"], r["cut_at_attempt"]) for k, r in rows.items()} == {
        A: ("budget", 2),
        B: ("budget", 2),
        C: ("budget", 2),
        E: (None, None),
        F: ("budget", 3),
    }
    got = _summary(data, WhatIf(retry_budget=0.5, window_ms=600_000))
    assert got["attempts"] == (13, 7, 7)
    assert got["cost_micros"] == (800_000, 200_000, 200_000)  # a's reserved 429 attempt
    assert got["successes"] == (3, 0, 0)


def test_more_attempts_than_recorded_is_an_unknown_range(data: Path) -> None:
    rows = _requests(data, WhatIf(max_attempts=4))
    assert rows[E]["replayed_status"] == "unknown"
    assert rows[E]["unknown_extra_attempts_max"] == 2
    assert rows[E]["replayed_deadline_miss"] is None
    assert [r["replayed_status"] for k, r in sorted(rows.items()) if k != E] == [
        "success",
        "success",
        "failed",
        "success",
    ]
    got = _summary(data, WhatIf(max_attempts=4))
    assert got["attempts"] == (13, 14, 15)
    assert got["successes"] == (3, 3, 4)
    assert got["deadline_misses"] == (1, 1, 2)
    con, _ = connect(data)
    unknown = whatif(con, WhatIf(max_attempts=4)).column("unknown_requests").to_pylist()
    assert unknown == [1] * 6


def test_lower_backoff_cap_shifts_retries_and_marks_estimates(data: Path) -> None:
    rows = _requests(data, WhatIf(max_backoff_ms=0))
    # a's retry waited for Retry-After (250 ms), which a cap cannot shorten
    assert {k: r["shift_ms"] for k, r in rows.items()} == {A: 0, B: 400, C: 400, E: 200, F: 400}
    assert {k for k, r in rows.items() if r["estimated"]} == {B, F}
    assert rows[F]["recorded_deadline_miss"]
    assert not rows[F]["replayed_deadline_miss"]
    got = _summary(data, WhatIf(max_backoff_ms=0))
    assert got["deadline_misses"] == (1, 0, 0)
    assert got["attempts"] == (13, 13, 13)


def test_policy_limits_come_from_a_control_plane_policy(data: Path, tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy_to_obj(policy_with(max_total_attempts=2))))
    policy = WhatIf.from_policy(read_policy_file(path))
    assert policy == WhatIf(max_attempts=2, max_backoff_ms=1_500, no_fallback=False)
    assert WhatIf.from_policy(read_policy_file(path), max_attempts=3).max_attempts == 3
    with pytest.raises(ValueError, match="retry_budget"):
        WhatIf(retry_budget=1.5)
    with pytest.raises(ValueError, match="max_attempts"):
        WhatIf(max_attempts=0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retryscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_whatif_flags_policy_file_and_errors(data: Path, tmp_path: Path) -> None:
    done = _cli("whatif", str(data), "--max-attempts", "2", "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["policy"] == "max_attempts=2"
    attempts = next(r for r in out["summary"] if r["metric"] == "attempts")
    assert attempts == {
        "metric": "attempts",
        "recorded": 13,
        "replayed_low": 10,
        "replayed_high": 10,
        "estimated_requests": 0,
        "unknown_requests": 0,
    }
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy_to_obj(policy_with(max_total_attempts=2))))
    text = _cli("whatif", str(data), "--policy", str(path))
    assert text.returncode == 0, text.stderr
    assert "max_attempts=2, max_backoff_ms=1500" in text.stdout
    assert "outcome unknown" in text.stdout
    missing = _cli("whatif", str(data))
    assert missing.returncode == 2
    assert "--policy FILE" in missing.stderr
    bad = _cli("whatif", str(data), "--retry-budget", "2")
    assert bad.returncode == 2
    assert "retry_budget" in bad.stderr
