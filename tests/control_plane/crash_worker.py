"""A worker process for the journal crash tests: runs the lab request against a receiver.

Usage: python crash_worker.py JOURNAL URL DEADLINE_MS [job]. The receiver holds the
submission, so the test can kill this process after the dispatch crossed the effect
boundary; with ``job`` the request submits a provider job and polls it (the test kills the
process once the job id is journaled, while it waits to poll).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from retryscope.control._calls import CallResult, Dispatch, Job, Pending, Submitted
from retryscope.control._controller import RetryController
from retryscope.control._journal import Journal
from retryscope.control._lab import (
    IDEMPOTENCY_KEY,
    OPERATION,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)
from retryscope.http_rules import classify_status, parse_retry_after
from retryscope.vocabulary import OutcomeKind


def submit(url: str, clock: Any = None) -> Callable[[Dispatch], CallResult]:
    """A real HTTP call: POST with the idempotency key; statuses and Retry-After classified.

    With a virtual ``clock`` each call takes 100 ms of it.
    """

    def call(d: Dispatch) -> CallResult:
        req = urllib.request.Request(
            f"{url}/submit?route={d.route.route_id}",
            data=b"{}",
            method="POST",
            headers={"Idempotency-Key": d.idempotency_key},
        )
        if clock is not None:
            clock.advance_ms(100)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return CallResult(value=json.load(resp), http_status=resp.status)
        except urllib.error.HTTPError as err:
            now_ms = (clock() if clock is not None else time.time_ns()) // 1_000_000
            hint = parse_retry_after(err.headers.get("Retry-After"), now_ms=now_ms, cap_ms=2_000)
            kind = classify_status(err.code, idempotent=True) or OutcomeKind.PROTOCOL_VIOLATION
            return CallResult(kind=kind, retry_after_ms=hint.delay_ms, http_status=err.code)

    return call


def submit_job(url: str) -> Callable[[Dispatch], Submitted]:
    """Submit a provider job once (POST /jobs); the controller polls it by id."""

    def call(d: Dispatch) -> Submitted:
        req = urllib.request.Request(
            f"{url}/jobs", data=b"{}", method="POST", headers={"Idempotency-Key": d.idempotency_key}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return Submitted(json.load(resp)["id"])

    return call


def poll_job(url: str) -> Callable[[Job], CallResult | Pending]:
    """Poll a provider job by id (GET /jobs/<id>)."""

    def poll(job: Job) -> CallResult | Pending:
        with urllib.request.urlopen(f"{url}/jobs/{job.job_id}", timeout=60) as resp:
            body = json.load(resp)
        return Pending() if body["status"] == "running" else CallResult(value=body["result"])

    return poll


def main() -> None:
    journal_path, url, deadline_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    job = sys.argv[4:] == ["job"]
    controller = RetryController(
        reference_policy(),
        Journal(journal_path),
        holder="worker",
        lease_ttl_ms=200,
        poll=poll_job(url),
    )
    controller.run(
        submit_job(url) if job else submit(url),
        request=REQUEST_PAYLOAD,
        idempotency_key=IDEMPOTENCY_KEY,
        operation=OPERATION,
        tenant=TENANT,
        deadline_ms=deadline_ms,
    )


if __name__ == "__main__":
    main()
