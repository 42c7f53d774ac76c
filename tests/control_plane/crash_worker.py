"""A worker process for the journal crash test: runs the lab request against a receiver.

Usage: python crash_worker.py JOURNAL URL DEADLINE_MS. The receiver holds the submission,
so the test can kill this process after the dispatch crossed the effect boundary.
"""

from __future__ import annotations

import sys
import urllib.request
from dataclasses import replace

from retryscope.instrumentation.controller import CallResult, Dispatch, RetryController
from retryscope.instrumentation.journal import Journal
from retryscope.instrumentation.lab import (
    IDEMPOTENCY_KEY,
    OPERATION,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)


def submit(url: str) -> object:
    def call(d: Dispatch) -> CallResult:
        req = urllib.request.Request(
            f"{url}/submit?route={d.route.route_id}",
            data=b"{}",
            method="POST",
            headers={"Idempotency-Key": d.idempotency_key},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return CallResult(value=resp.read().decode(), http_status=resp.status)

    return call


def main() -> None:
    journal_path, url, deadline_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    policy = replace(reference_policy(), deadline_ms=deadline_ms)
    controller = RetryController(policy, Journal(journal_path), holder="worker", lease_ttl_ms=200)
    controller.run(
        submit(url),  # type: ignore[arg-type]
        request=REQUEST_PAYLOAD,
        idempotency_key=IDEMPOTENCY_KEY,
        operation=OPERATION,
        tenant=TENANT,
    )


if __name__ == "__main__":
    main()
