"""Recovery that is visible: the reconciliation poll is an attempt span with its outcome,
the recovered value is returned, a crash-and-recover run reads amplification 1 in the
report; provider jobs are submitted once and polled by id, within the polling bounds,
also across a crash."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from retryscope import vocabulary as v
from retryscope.control._calls import Dispatch
from retryscope.control._controller import RetryController
from retryscope.control._journal import (
    EventKind,
    Journal,
    PendingDispatch,
    ReceiverStatus,
    Reconciliation,
)
from retryscope.control._lab import (
    IDEMPOTENCY,
    IDEMPOTENCY_KEY,
    REQUEST_ARGUMENTS,
    reference_policy,
)
from retryscope.control._policy import PollPolicy
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter
from retryscope.vocabulary import Outcome, Terminal

WORKER = Path(__file__).with_name("crash_worker.py")
RUN = REQUEST_ARGUMENTS


def _poll_by_key(receiver: Any) -> Any:
    def reconcile(pending: PendingDispatch) -> Reconciliation:
        url = f"{receiver.url}/status?key={quote(IDEMPOTENCY_KEY)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        return Reconciliation(ReceiverStatus(body["status"]), value=body.get("result"))

    return reconcile


def _kill_when(proc: subprocess.Popen[bytes], ready: Any, what: str) -> None:
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert proc.poll() is None, f"the worker exited before {what}"
            assert time.monotonic() < deadline, f"the worker never reached {what}"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    time.sleep(0.3)  # the dead worker's 200 ms lease expires


def _parquet_provider(directory: Path) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(directory)))
    return provider


def _crash_and_recover(tmp_path: Path, receiver: Any, submit: Any) -> tuple[Any, dict[str, Any]]:
    """A worker process SIGKILLed mid-call, then this process recovers the request with
    spans written as Parquet under ``tmp_path/spans``: the result and the created event."""
    db = tmp_path / "journal.sqlite"
    deadline = time.time_ns() // 1_000_000 + 120_000
    receiver.hold = threading.Event()
    proc = subprocess.Popen([sys.executable, str(WORKER), str(db), receiver.url, str(deadline)])
    _kill_when(proc, receiver.hold.is_set, "the dispatch")
    receiver.hold = None
    provider = _parquet_provider(tmp_path / "spans")
    with Journal(db) as journal:
        controller = RetryController(
            reference_policy(),
            journal,
            reconcile=_poll_by_key(receiver),
            holder="recoverer",
            tracer_provider=provider,
        )
        result = controller.run(submit(receiver.url), deadline_ms=deadline, **RUN)
        created = journal.verify(IDEMPOTENCY)[0].body
    provider.shutdown()
    return result, created


def test_a_crash_and_recover_run_reads_amplification_one_with_its_reconciliation(
    tmp_path: Path, receiver: Any, submit: Any
) -> None:
    from retryscope.analytics import build_report, connect, findings

    result, created = _crash_and_recover(tmp_path, receiver, submit)

    assert (result.terminal, result.value) == (Terminal.COMPLETE, "ok")  # the stored result
    assert receiver.submits[IDEMPOTENCY_KEY] == 1  # never resubmitted
    assert receiver.polls[IDEMPOTENCY_KEY] == 1
    assert result.logical_request_id == created["logical_request_id"]  # the same request
    (attempt,) = result.receipt.attempts
    assert attempt.outcome is Outcome.SUCCESS

    con, _ = connect(tmp_path / "spans")
    report = build_report(con)
    assert report["logical_requests"] == 1
    assert report["amplification_ratio"] == 1.0
    assert report["sends_per_request"] == 1.0  # the poll is the one physical attempt
    (row,) = con.execute(
        "SELECT name, outcome, attempt_ordinal, attributes['retryscope.reconciliation.method'],"
        " logical_request_id FROM attempts"
    ).fetchall()
    assert row == (
        "reconcile private-primary",
        "success",
        1,
        '"idempotency_key"',
        result.logical_request_id,
    )
    (event,) = con.execute(
        "SELECT e.attributes FROM (SELECT unnest(events) AS e FROM spans"
        " WHERE span_role = 'logical_request') WHERE e.name = 'retryscope.reconciliation'"
    ).fetchall()
    assert json.loads(event[0][v.RECONCILIATION_RESULT.key]) == "effect_confirmed"
    assert json.loads(event[0][v.RECONCILIATION_ATTEMPT_KEY]) == 1
    rules = set(findings(con).column("rule_id").to_pylist())
    assert "unreconciled_retry_after_indeterminate" not in rules
    assert "policy_drift" not in rules  # the recovered request followed its policy


def test_no_effect_after_the_crash_allows_exactly_one_new_dispatch_and_counts_two(
    tmp_path: Path, receiver: Any, submit: Any
) -> None:
    from retryscope.analytics import build_report, connect

    receiver.script = [(503, {})]  # the held submission has no effect
    result, _ = _crash_and_recover(tmp_path, receiver, submit)
    assert result.terminal is Terminal.COMPLETE
    assert receiver.submits[IDEMPOTENCY_KEY] == 2
    con, _ = connect(tmp_path / "spans")
    assert build_report(con)["amplification_ratio"] == 2.0  # what the receiver saw


def test_a_provider_job_is_submitted_once_and_polled_by_id(
    receiver: Any, spans: Any, worker: Any
) -> None:
    policy = replace(reference_policy(), polling=PollPolicy(interval_ms=20, max_polls=5))
    controller = RetryController(
        policy, poll=worker.poll_job(receiver.url), tracer_provider=spans.provider
    )
    result = controller.run(worker.submit_job(receiver.url), timeout_ms=30_000, **RUN)
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "job-1")
    assert receiver.jobs[IDEMPOTENCY_KEY] == 1
    assert receiver.job_polls["job-1"] == 3  # running, running, done
    (span,) = [
        s for s in spans.exporter.get_finished_spans() if s.attributes[v.SPAN_ROLE.key] == "attempt"
    ]
    assert (span.attributes[v.JOB_ID_KEY], span.attributes[v.JOB_POLLS_KEY]) == ("job-1", 3)

    receiver.job_running_polls = 100  # a job that outlives the polling bounds
    again = controller.run(
        worker.submit_job(receiver.url), timeout_ms=30_000, **{**RUN, "idempotency_key": "k2"}
    )
    assert again.terminal is Terminal.STOP_INDETERMINATE  # never resubmitted, left unknown
    assert receiver.jobs["k2"] == 1
    assert receiver.job_polls["job-2"] == 5  # max_polls


def test_job_polls_stop_before_the_deadline(receiver: Any, clock: Any, worker: Any) -> None:
    receiver.job_running_polls = 100
    controller = RetryController(
        reference_policy(), clock=clock, sleep=clock.sleep, poll=worker.poll_job(receiver.url)
    )
    result = controller.run(worker.submit_job(receiver.url), deadline_ms=3_500, **RUN)
    # submitted at 1,000 ms; polls at 2,000 and 3,000 ms; 4,000 ms is past the deadline
    assert receiver.job_polls["job-1"] == 2
    assert result.terminal is Terminal.STOP_INDETERMINATE
    assert clock.slept_ms == [1_000, 1_000]


def test_after_a_crash_the_job_is_polled_by_its_id_not_resubmitted(
    tmp_path: Path, receiver: Any, worker: Any
) -> None:
    db = tmp_path / "journal.sqlite"
    deadline = time.time_ns() // 1_000_000 + 120_000
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), receiver.url, str(deadline), "job"]
    )

    def journaled() -> bool:
        if not db.exists():
            return False
        with Journal(db) as j:
            return any(e.kind is EventKind.JOB_SUBMITTED for e in j.events(IDEMPOTENCY))

    _kill_when(proc, journaled, "the job's id")  # killed while it waits to poll
    assert receiver.jobs[IDEMPOTENCY_KEY] == 1
    with Journal(db) as journal:
        result = RetryController(
            reference_policy(),
            journal,
            poll=worker.poll_job(receiver.url),
            holder="recoverer",
        ).run(worker.submit_job(receiver.url), deadline_ms=deadline, **RUN)
        observed = [e for e in journal.verify(IDEMPOTENCY) if e.kind is EventKind.ATTEMPT_OBSERVED]
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "job-1")
    assert receiver.jobs[IDEMPOTENCY_KEY] == 1  # one submission across both processes
    assert [e.body["reconciled"] for e in observed] == ["succeeded"]


def test_a_caller_cancelled_while_reconciling_leaves_the_request_recoverable(
    tmp_path: Path,
) -> None:
    """The recovery's poll is cancelled with its caller: no terminal is committed over the
    dispatch that is still unresolved, and the next recovery settles it."""
    import asyncio

    from retryscope.control._controller import AsyncRetryController

    db = tmp_path / "journal.sqlite"
    deadline = time.time_ns() // 1_000_000 + 60_000
    with Journal(db) as journal:

        def crash(d: Dispatch) -> Any:
            raise KeyboardInterrupt  # the process dies in the call: no outcome recorded

        with contextlib.suppress(KeyboardInterrupt):
            RetryController(reference_policy(), journal, holder="w1", lease_ttl_ms=0).run(
                crash, deadline_ms=deadline, **RUN
            )

        async def slow_answer(pending: PendingDispatch) -> Reconciliation:
            await asyncio.sleep(30)
            return Reconciliation(ReceiverStatus.SUCCEEDED)

        async def cancelled_recovery() -> None:
            controller = AsyncRetryController(
                reference_policy(), journal, reconcile=slow_answer, holder="w2", lease_ttl_ms=0
            )
            task = asyncio.ensure_future(controller.run(crash, deadline_ms=deadline, **RUN))
            await asyncio.sleep(0.05)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(cancelled_recovery())
        kinds = [e.kind for e in journal.verify(IDEMPOTENCY)]  # still a valid prefix
        assert EventKind.TERMINAL_COMMITTED not in kinds
        result = RetryController(
            reference_policy(),
            journal,
            reconcile=lambda p: Reconciliation(ReceiverStatus.SUCCEEDED, value="stored"),
            holder="w3",
        ).run(crash, deadline_ms=deadline, **RUN)
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "stored")
