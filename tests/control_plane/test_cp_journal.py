"""The durable journal: crash after dispatch, recovery polls; fencing; tamper detection."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from retryscope.control._controller import RetryController
from retryscope.control._journal import (
    EventKind,
    Journal,
    JournalCorrupt,
    Lease,
    LeaseFenced,
    LeaseHeld,
    PendingDispatch,
    ReceiverStatus,
    ReconcileRequired,
    Reconciliation,
)
from retryscope.control._lab import (
    IDEMPOTENCY,
    IDEMPOTENCY_KEY,
    OPERATION,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)
from retryscope.control._policy import PollPolicy
from retryscope.vocabulary import Outcome, Terminal

WORKER = Path(__file__).with_name("crash_worker.py")


def _poll(receiver: Any) -> Callable[[PendingDispatch], Reconciliation]:
    """Reconcile by asking the receiver about the idempotency key (never resubmitting)."""

    def reconcile(pending: PendingDispatch) -> Reconciliation:
        assert pending.idempotency_digest == IDEMPOTENCY
        url = f"{receiver.url}/status?key={quote(IDEMPOTENCY_KEY)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            status = json.load(resp)["status"]
        return Reconciliation(ReceiverStatus(status))

    return reconcile


def _crash_worker_after_dispatch(db: Path, receiver: Any, deadline_ms: int) -> None:
    receiver.hold = threading.Event()
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), receiver.url, str(deadline_ms)],
    )
    try:
        assert receiver.hold.wait(60), "the worker never dispatched"
    finally:
        proc.kill()
        proc.wait(30)
    receiver.hold = None
    time.sleep(0.3)  # the dead worker's 200 ms lease expires


def _run(journal: Journal, receiver: Any, deadline_ms: int, submit: Any, **kw: Any) -> Any:
    controller = RetryController(
        reference_policy(),
        journal,
        reconcile=_poll(receiver),
        holder="recoverer",
        lease_ttl_ms=5_000,
        **kw,
    )
    return controller.run(
        submit(receiver.url),
        request=REQUEST_PAYLOAD,
        idempotency_key=IDEMPOTENCY_KEY,
        operation=OPERATION,
        tenant=TENANT,
        deadline_ms=deadline_ms,
    )


def test_crash_after_dispatch_recovery_polls_instead_of_resubmitting(
    tmp_path: Path, receiver: Any, submit: Any
) -> None:
    db = tmp_path / "journal.sqlite"
    deadline = time.time_ns() // 1_000_000 + 120_000
    _crash_worker_after_dispatch(db, receiver, deadline)
    assert receiver.submits[IDEMPOTENCY_KEY] == 1

    journal = Journal(db)
    before = journal.verify(IDEMPOTENCY)
    assert [e.kind for e in before] == [
        EventKind.LOGICAL_REQUEST_CREATED,
        EventKind.ATTEMPT_RESERVED,
        EventKind.ATTEMPT_DISPATCHED,  # durable before the call crossed the boundary
    ]
    result = _run(journal, receiver, deadline, submit)

    assert result.terminal is Terminal.COMPLETE
    assert receiver.submits[IDEMPOTENCY_KEY] == 1  # not resubmitted
    assert receiver.polls[IDEMPOTENCY_KEY] == 1  # reconciled by polling
    after = journal.verify(IDEMPOTENCY)
    observed = [e for e in after if e.kind is EventKind.ATTEMPT_OBSERVED]
    assert [e.body["reconciled"] for e in observed] == ["succeeded"]
    assert [e.kind for e in after][-2:] == [
        EventKind.RETRY_DECISION_COMMITTED,
        EventKind.TERMINAL_COMMITTED,
    ]
    assert {e.generation for e in after} == {1, 2}

    # The dead worker's late result is kept as evidence but cannot overwrite the terminal.
    stale = Lease(IDEMPOTENCY, "worker", 1, 0)
    with pytest.raises(LeaseFenced) as fenced:
        journal.append(stale, EventKind.TERMINAL_COMMITTED, {"terminal": "stop_indeterminate"})
    evidence = journal.events(IDEMPOTENCY, include_fenced=True)
    assert evidence[-1].seq == fenced.value.evidence_seq
    assert evidence[-1].fenced
    assert journal.verify(IDEMPOTENCY)[-1].body["terminal"] == "complete"

    # A finished request is not run again.
    again = _run(journal, receiver, deadline, submit)
    assert again.terminal is Terminal.COMPLETE
    assert receiver.submits[IDEMPOTENCY_KEY] == 1
    journal.close()


def test_verified_no_effect_permits_exactly_one_new_dispatch(
    tmp_path: Path, receiver: Any, submit: Any
) -> None:
    db = tmp_path / "journal.sqlite"
    deadline = time.time_ns() // 1_000_000 + 120_000
    receiver.script = [(503, {})]  # the held submission has no effect
    _crash_worker_after_dispatch(db, receiver, deadline)
    with Journal(db) as journal:
        result = _run(journal, receiver, deadline, submit)
        assert result.terminal is Terminal.COMPLETE
        assert receiver.polls[IDEMPOTENCY_KEY] == 1
        assert receiver.submits[IDEMPOTENCY_KEY] == 2
        attempts = result.receipt.attempts
        assert [a.outcome for a in attempts] == [Outcome.RETRYABLE, Outcome.SUCCESS]
        assert attempts[1].start_ms >= attempts[1].not_before_ms


def test_leases_fence_and_the_journal_is_append_only_and_verified(tmp_path: Path) -> None:
    db = tmp_path / "journal.sqlite"
    with Journal(db) as journal:
        first = journal.acquire("k", "a", now_ms=0, ttl_ms=1_000)
        with pytest.raises(LeaseHeld):
            journal.acquire("k", "b", now_ms=500, ttl_ms=1_000)
        journal.append(first, EventKind.LOGICAL_REQUEST_CREATED, {"x": 1})
        second = journal.acquire("k", "b", now_ms=1_000, ttl_ms=1_000)
        assert second.generation == first.generation + 1
        with pytest.raises(LeaseFenced):
            journal.renew(first, now_ms=1_001, ttl_ms=1_000)
        with pytest.raises(LeaseFenced):
            journal.append(first, EventKind.ATTEMPT_RESERVED, {"attempt_ordinal": 1})
        journal.append(second, EventKind.ATTEMPT_RESERVED, {"attempt_ordinal": 1})
        assert [e.kind for e in journal.verify("k")] == [
            EventKind.LOGICAL_REQUEST_CREATED,
            EventKind.ATTEMPT_RESERVED,
        ]
    raw = sqlite3.connect(db)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("UPDATE events SET body = '{}'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM events")
    raw.execute(
        "INSERT INTO events (request_key, generation, kind, body, sha256, fenced) "
        "VALUES ('k', 2, 'attempt_dispatched', '{}', 'forged', 0)"
    )
    raw.commit()
    raw.close()
    with Journal(db) as journal, pytest.raises(JournalCorrupt, match="hash chain"):
        journal.verify("k")


def test_event_order_is_verified(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        lease = journal.acquire("k", "a", now_ms=0, ttl_ms=1_000)
        journal.append(lease, EventKind.LOGICAL_REQUEST_CREATED, {})
        journal.append(lease, EventKind.ATTEMPT_OBSERVED, {})
        with pytest.raises(JournalCorrupt, match="attempt_observed"):
            journal.verify("k")


def test_unresolved_dispatch_is_never_resubmitted(tmp_path: Path) -> None:
    """A crash inside the call (simulated in process): without a way to ask the receiver
    nothing is dispatched; an answer that stays ``in_progress`` is polled within the
    policy's polling bounds and then left indeterminate, still without a second dispatch."""
    policy = replace(reference_policy(), polling=PollPolicy(interval_ms=10, max_polls=3))
    deadline = time.time_ns() // 1_000_000 + 60_000
    calls: list[int] = []
    asked: list[int] = []

    def crash(d: Any) -> Any:
        calls.append(d.attempt_ordinal)
        raise KeyboardInterrupt  # escapes like a killed process: no outcome is recorded

    def in_progress(pending: PendingDispatch) -> Reconciliation:
        asked.append(time.monotonic_ns())
        return Reconciliation(ReceiverStatus.IN_PROGRESS)

    with Journal(tmp_path / "j.sqlite") as journal:
        run = {
            "request": REQUEST_PAYLOAD,
            "idempotency_key": IDEMPOTENCY_KEY,
            "operation": OPERATION,
            "tenant": TENANT,
            "deadline_ms": deadline,
        }
        with pytest.raises(KeyboardInterrupt):
            RetryController(policy, journal, holder="w1", lease_ttl_ms=0).run(crash, **run)
        with pytest.raises(ReconcileRequired):
            RetryController(policy, journal, holder="w2", lease_ttl_ms=0).run(crash, **run)
        result = RetryController(
            policy, journal, holder="w3", reconcile=in_progress, lease_ttl_ms=0
        ).run(crash, **run)
        assert result.terminal is Terminal.STOP_INDETERMINATE
        assert calls == [1]
        assert len(asked) == 3  # max_polls
        # the interval, on a ms clock (each wait is rounded down to the ms)
        assert all(b - a >= 9_000_000 for a, b in itertools.pairwise(asked))
        assert [e.generation for e in journal.verify(IDEMPOTENCY)][-1] == 3
