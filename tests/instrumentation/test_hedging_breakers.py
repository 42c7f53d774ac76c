"""Hedged attempts, circuit-breaker stamps, reconciliation events, overlap detection."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

import retryscope
from retryscope.instrumentation import LogicalRequest
from retryscope.instrumentation.integrations.httpx import (
    AsyncRetryscopeTransport,
    RetryscopeTransport,
)
from tests.containment import contains
from tests.instrumentation.conftest import Audit, LocalServer, Recorded, Reply


def test_threaded_hedges_winner_committed_loser_cancelled_with_cost(
    audit: Audit, server: LocalServer
) -> None:
    def reply(recorded: Recorded) -> Reply:
        if recorded.path == "/slow":
            time.sleep(0.2)
        return Reply(200, body=recorded.path.encode())

    server.reply = reply
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    started = threading.Barrier(2)

    def race(req: LogicalRequest, hedge: int, path: str) -> str:
        with req.attempt("primary", hedge_ordinal=hedge, hedge_owner="harness") as a:
            started.wait()
            body = client.get(path).text
            if path == "/fast":
                a.commit_hedge()
            else:
                a.cancel_hedge(cost_actual=120)
            return body

    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        ThreadPoolExecutor(2) as pool,
    ):
        futures = [
            pool.submit(contextvars.copy_context().run, race, req, 0, "/slow"),
            pool.submit(contextvars.copy_context().run, race, req, 1, "/fast"),
        ]
        assert sorted(f.result() for f in futures) == ["/fast", "/slow"]
    rows = audit.rows(
        "SELECT hedge_ordinal, attributes['retryscope.hedge.owner'], "
        "hedge_result, outcome, cost_actual_micros, "
        "attributes['retryscope.attempt.overlapping'] "
        "FROM attempts WHERE layer = 'harness' ORDER BY hedge_ordinal"
    )
    assert rows == [
        (0, '"harness"', "cancelled", None, 120, None),
        (1, '"harness"', "winner", "success", None, None),
    ]
    assert audit.rows("SELECT terminal FROM logical_requests") == [("complete",)]
    # a hedge races its primary: two attempts per layer, and no layer retried
    assert audit.analysed() == ({"harness": 2, "transport": 2}, [])


def test_overlapping_non_hedges_are_flagged(audit: Audit, server: LocalServer) -> None:
    async def one(req: LogicalRequest, client: httpx.AsyncClient, n: int) -> None:
        with req.attempt("primary"):
            await client.get(f"/{n}")
            await asyncio.sleep(0.01)

    async def main() -> None:
        async with httpx.AsyncClient(
            base_url=server.url, transport=AsyncRetryscopeTransport()
        ) as client:
            with retryscope.logical_request(
                operation="chat", tracer_provider=audit.provider
            ) as req:
                await asyncio.gather(one(req, client, 1), one(req, client, 2))

    asyncio.run(main())
    flags = audit.rows(
        "SELECT list(coalesce(attributes['retryscope.attempt.overlapping'], 'false') "
        "ORDER BY attempt_ordinal) FROM attempts WHERE layer = 'harness'"
    )
    assert flags == [(["false", "true"],)]
    # each async task's sends were attributed to its own attempt
    assert audit.rows(
        "SELECT count(DISTINCT parent_attempt_ordinal) FROM attempts WHERE layer = 'transport'"
    ) == [(2,)]


def test_breaker_state_and_generation_stamped_at_dispatch(audit: Audit) -> None:
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        with req.attempt("primary", breaker_state="half_open", breaker_generation=7) as a:
            a.set_outcome("unavailable")
        with req.attempt("fallback", route_priority=1) as b:
            b.set_breaker("closed", 3)
    rows = audit.rows(
        "SELECT route_id, breaker_state, attributes['retryscope.breaker.generation'] "
        "FROM attempts ORDER BY attempt_ordinal"
    )
    assert rows == [("primary", "half_open", "7"), ("fallback", "closed", "3")]
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        contains("LogicalRequest.attempt", "BreakerState"),
    ):
        req.attempt("primary", breaker_state="ajar")


def test_reconciliation_event_on_the_logical_request(audit: Audit) -> None:
    with retryscope.logical_request(operation="pay", tracer_provider=audit.provider) as req:
        with req.attempt("primary") as a:
            a.set_outcome("unknown_provider_acceptance")
        req.record_reconciliation("no_effect", method="idempotency_key", attempt=a)
        with req.attempt("primary"):
            pass
    row = audit.rows(
        "SELECT reconciliation_result, len(events), events[1].name, "
        "events[1].attributes['retryscope.reconciliation.method'], "
        "events[1].attributes['retryscope.reconciliation.attempt_ordinal'] "
        "FROM logical_requests"
    )
    assert row == [("no_effect", 1, "retryscope.reconciliation", '"idempotency_key"', "1")]
    with contains("LogicalRequest.record_reconciliation", "not_sure"):
        req.record_reconciliation("not_sure", method="readback")


def test_hedge_calls_need_a_hedge(audit: Audit) -> None:
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
        contains("Attempt.commit_hedge", "hedge group"),
    ):
        a.commit_hedge()
