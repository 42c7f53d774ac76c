"""AsyncRetryController: the same receipts as the sync one, cancellation, one policy for many
concurrent requests with shared retry budget and breakers, hedging against real servers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope import vocabulary as v
from retryscope.control._calls import CallResult, Dispatch, RunResult
from retryscope.control._controller import AsyncRetryController, RetryController
from retryscope.control._evaluator import evaluate
from retryscope.control._lab import (
    FALLBACK,
    OPERATION,
    PRIMARY,
    REQUEST_ARGUMENTS,
    REQUEST_PAYLOAD,
    TENANT,
    reference_policy,
)
from retryscope.control._policy import (
    CircuitBreakerPolicy,
    HedgePolicy,
    InvalidProtection,
    Jitter,
    RetryBudgetPolicy,
    RetryPolicy,
)
from retryscope.control._receipts import replay
from retryscope.vocabulary import HedgeResult, OutcomeKind, Terminal
from tests.control_plane.conftest import VirtualClock

RUN = REQUEST_ARGUMENTS

Step = tuple[OutcomeKind | None, int, int | None, int | None]


def _result(d: Dispatch, step: Step) -> CallResult:
    kind, _, hint, actual = step
    cost = None if actual is None else min(actual, d.route.max_attempt_cost_micros)
    return CallResult(
        kind=kind,
        value=None if kind is not None else f"answer from {d.route.route_id}",
        retry_after_ms=hint,
        cost_actual_micros=cost,
    )


def _sync_run(policy: RetryPolicy, script: list[Step], deadline_ms: int) -> RunResult:
    clock = VirtualClock(1_000)
    steps = iter(script)

    def call(d: Dispatch) -> CallResult:
        step = next(steps, (None, 10, None, None))
        clock.advance_ms(step[1])
        return _result(d, step)

    controller = RetryController(policy, clock=clock, sleep=clock.sleep)
    return controller.run(call, deadline_ms=deadline_ms, **RUN)


def _async_run(policy: RetryPolicy, script: list[Step], deadline_ms: int) -> RunResult:
    clock = VirtualClock(1_000)
    steps = iter(script)

    async def call(d: Dispatch) -> CallResult:
        step = next(steps, (None, 10, None, None))
        clock.advance_ms(step[1])
        await asyncio.sleep(0)  # a real await point between dispatch and answer
        return _result(d, step)

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)

    controller = AsyncRetryController(policy, clock=clock, sleep=sleep)
    return asyncio.run(controller.run(call, deadline_ms=deadline_ms, **RUN))


policies = st.builds(
    lambda total, a0, a1, jitter, budget, breaker: replace(
        reference_policy(),
        max_total_attempts=total,
        routes=(replace(PRIMARY, max_attempts=a0), replace(FALLBACK, max_attempts=a1)),
        jitter=jitter,
        retry_budget=budget,
        circuit_breaker=breaker,
    ),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 3),
    st.none() | st.builds(Jitter, st.just("sched-1"), st.integers(0, 2**32)),
    st.none() | st.builds(RetryBudgetPolicy, st.integers(0, 100), st.integers(0, 2)),
    st.none()
    | st.builds(
        CircuitBreakerPolicy,
        st.integers(1, 100),
        st.integers(1, 3),
        st.integers(10, 5_000),
        st.integers(1, 3_000),
        st.integers(1, 2),
    ),
)
scripts = st.lists(
    st.tuples(
        st.sampled_from([*OutcomeKind, None]),
        st.integers(0, 2_000),
        st.none() | st.integers(0, 5_000),
        st.none() | st.integers(0, 400_000),
    ),
    max_size=8,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies, scripts, st.integers(1_001, 20_000))
def test_sync_and_async_controllers_write_identical_receipts(
    policy: RetryPolicy, script: list[Step], deadline_ms: int
) -> None:
    sync, asynchronous = (
        _sync_run(policy, script, deadline_ms),
        _async_run(policy, script, deadline_ms),
    )
    assert asynchronous.receipt_json == sync.receipt_json
    assert (asynchronous.terminal, asynchronous.value) == (sync.terminal, sync.value)
    assert replay(sync.receipt_json).ok


# --- cancellation --------------------------------------------------------------------------
def _span_attrs(spans: Any, role: str) -> list[dict[str, Any]]:
    return [
        dict(s.attributes)
        for s in spans.exporter.get_finished_spans()
        if s.attributes[v.SPAN_ROLE.key] == role
    ]


def test_cancelling_the_caller_cancels_the_attempt_in_flight_and_records_it(spans: Any) -> None:
    seen: list[str] = []
    results: list[RunResult] = []

    async def call(d: Dispatch) -> CallResult:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(f"attempt {d.attempt_ordinal} cancelled")
            raise
        return CallResult(value="never")

    async def main() -> None:
        controller = AsyncRetryController(
            reference_policy(), tracer_provider=spans.provider, on_result=results.append
        )
        task = asyncio.ensure_future(controller.run(call, timeout_ms=60_000, **RUN))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["attempt 1 cancelled"]
    (result,) = results
    assert result.terminal is Terminal.STOP_CANCELLED
    (attempt,) = result.receipt.attempts
    assert attempt.cancelled
    assert attempt.outcome_kind is OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE  # effect unknown
    (span,) = _span_attrs(spans, "attempt")
    assert span[v.CANCELLED_KEY] is True
    assert span[v.ERROR_TYPE.key] == "asyncio.exceptions.CancelledError"
    (request,) = _span_attrs(spans, "logical_request")
    assert request[v.TERMINAL.key] == "stop_cancelled"
    assert replay(result.receipt_json).ok


def test_a_timeout_around_the_run_cancels_during_the_backoff(spans: Any) -> None:
    results: list[RunResult] = []

    async def call(d: Dispatch) -> CallResult:
        return CallResult(kind=OutcomeKind.RATE_LIMITED, retry_after_ms=2_000)

    async def main() -> None:
        controller = AsyncRetryController(
            reference_policy(), tracer_provider=spans.provider, on_result=results.append
        )
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):  # the caller's own deadline, inside ours
                await controller.run(call, timeout_ms=60_000, **RUN)

    asyncio.run(main())
    (result,) = results
    assert result.terminal is Terminal.STOP_CANCELLED
    assert [a.cancelled for a in result.receipt.attempts] == [False]  # waiting, not in flight
    assert result.receipt.cancelled_at_ms is not None
    assert replay(result.receipt_json).ok


def test_the_sync_controller_refuses_hedging_and_async_calls(clock: Any) -> None:
    hedged = replace(reference_policy(), hedging=HedgePolicy(FALLBACK.route_id, 100, 1, 50, 1))
    with pytest.raises(InvalidProtection) as err:
        RetryController(hedged)
    assert err.value.field == "hedging"

    async def call(d: Dispatch) -> str:
        return "x"

    with pytest.raises(TypeError, match="AsyncRetryController"):
        RetryController(reference_policy(), clock=clock, sleep=clock.sleep).run(
            call, deadline_ms=5_000, **RUN
        )


# --- a real provider on 127.0.0.1 ------------------------------------------------------------
@dataclass
class Provider:
    """Counts every request per route and answers as ``behaviour`` says."""

    url: str = ""
    hits: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    peak_retries: int = 0
    retries_now: int = 0
    behaviour: dict[str, tuple[int, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def provider() -> Iterator[Provider]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_POST(self) -> None:
            route = self.path.strip("/").split("/")[0]
            retry = int(self.headers.get("x-attempt", "1")) > 1
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, seconds = state.behaviour.get(route, (200, 0.0))
            with state.lock:
                state.hits[route] += 1
                state.retries_now += retry
                state.peak_retries = max(state.peak_retries, state.retries_now)
            time.sleep(seconds)
            with state.lock:
                state.retries_now -= retry
            body = json.dumps({"route": route}).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (a cancelled hedge)
                return

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # concurrent connects are queued, never refused
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _http_call(client: httpx.AsyncClient, url: str) -> Any:
    async def call(d: Dispatch) -> CallResult:
        response = await client.post(
            f"{url}/{d.route.route_id}/v1/chat",
            json={"ticket": "INC"},
            headers={"idempotency-key": d.idempotency_key, "x-attempt": str(d.attempt_ordinal)},
        )
        if response.status_code == 200:
            return CallResult(value=response.json(), http_status=200, cost_actual_micros=1_000)
        kind = OutcomeKind.RATE_LIMITED if response.status_code == 429 else OutcomeKind.UNAVAILABLE
        return CallResult(kind=kind, http_status=response.status_code, cost_actual_micros=0)

    return call


OUTAGE = replace(
    reference_policy(),
    base_backoff_ms=20,
    max_backoff_ms=50,
    routes=(replace(PRIMARY, max_attempts=3), FALLBACK),
    retry_budget=RetryBudgetPolicy(budget_percent=20, min_retry_concurrency=2),
    circuit_breaker=CircuitBreakerPolicy(
        failure_percent=50,
        minimum_throughput=5,
        sampling_duration_ms=60_000,
        break_duration_ms=60_000,
        half_open_probes=1,
    ),
)


def test_one_policy_serves_many_concurrent_requests_with_shared_budget_and_breaker(
    provider: Provider, spans: Any
) -> None:
    """An outage of the primary under two waves of concurrent requests of one controller
    (10, then 20): retries in flight never exceed the shared budget, the breaker opens and
    the second wave goes straight to the fallback, and the provider's count equals the
    attempts in the receipts."""
    provider.behaviour = {"private-primary": (503, 0.05), "external-fallback": (200, 0.01)}
    results: list[RunResult] = []

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            controller = AsyncRetryController(OUTAGE, tracer_provider=spans.provider)
            call = _http_call(client, provider.url)

            async def one(i: int) -> RunResult:
                return await controller.run(
                    call,
                    request={**REQUEST_PAYLOAD, "n": i},
                    idempotency_key=f"key-{i}",
                    operation=OPERATION,
                    tenant=TENANT,
                    timeout_ms=30_000,
                )

            # two waves of concurrent requests: the first meets the outage, the second the
            # breaker the first one opened
            results.extend(await asyncio.gather(*(one(i) for i in range(10))))
            results.extend(await asyncio.gather(*(one(i) for i in range(10, 30))))

    asyncio.run(main())
    terminals = Counter(r.terminal for r in results)
    assert terminals[Terminal.COMPLETE] > 0
    assert terminals[Terminal.STOP_RETRY_BUDGET] > 0  # the budget refused retries
    attempts = [a for r in results for a in r.receipt.attempts]
    assert sum(provider.hits.values()) == len(attempts)  # every attempt accounted
    assert provider.hits["private-primary"] == sum(a.route_id == PRIMARY.route_id for a in attempts)
    # the budget: retries in flight at once stay within max(2, 20 % of requests in flight)
    assert provider.peak_retries <= max(2, 20 * 20 // 100)
    gates = [g for r in results for g in r.receipt.gates]
    assert {g.snapshot.guard.value for g in gates} == {"retry_budget", "breaker"}
    opened = [g for g in gates if g.snapshot.guard.value == "breaker" and not g.admitted]
    assert opened  # the primary's breaker opened ...
    skipped = [r for r in results if r.receipt.attempts[0].route_id == FALLBACK.route_id]
    assert skipped == results[10:]  # ... and the second wave went straight to the fallback
    assert all(r.terminal is Terminal.COMPLETE for r in skipped)
    generations = [g.snapshot.generation for g in gates if g.route_id == PRIMARY.route_id]
    assert max(generations) >= 1
    for r in results:
        again = evaluate(OUTAGE, r.receipt.admission, r.receipt.attempts, gates=r.receipt.gates)
        assert again.terminal is r.terminal  # the recorded verdicts replay the decisions
    # the snapshots are on the spans too
    attempt_spans = _span_attrs(spans, "attempt")
    assert all(v.BREAKER_STATE.key in a for a in attempt_spans)
    assert any(v.RETRY_BUDGET_TOKENS_KEY in a for a in attempt_spans)
    routed = [
        e
        for s in spans.exporter.get_finished_spans()
        for e in s.events
        if e.name == v.ROUTING_EVENT
    ]
    assert len(routed) == len(gates)


HEDGED = replace(
    reference_policy(),
    hedging=HedgePolicy(
        route_id=FALLBACK.route_id, delay_ms=100, max_hedges=1, budget_percent=50,
        min_hedge_concurrency=1,
    ),
)  # fmt: skip


def test_a_slow_primary_is_hedged_the_hedge_wins_and_the_loser_is_cancelled(
    provider: Provider, spans: Any
) -> None:
    provider.behaviour = {"private-primary": (200, 2.0), "external-fallback": (200, 0.01)}
    results: list[RunResult] = []

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            controller = AsyncRetryController(HEDGED, tracer_provider=spans.provider)
            started = time.monotonic()
            results.append(
                await controller.run(_http_call(client, provider.url), timeout_ms=30_000, **RUN)
            )
            assert time.monotonic() - started < 1.5  # the slow primary was not waited for

    asyncio.run(main())
    (result,) = results
    assert result.terminal is Terminal.COMPLETE
    assert result.value == {"route": "external-fallback"}
    first, hedge = result.receipt.attempts
    assert (first.hedge_ordinal, first.hedge_result, first.cancelled) == (
        0,
        HedgeResult.CANCELLED,
        True,
    )
    assert (hedge.hedge_ordinal, hedge.hedge_result) == (1, HedgeResult.WINNER)
    assert hedge.start_ms >= first.start_ms + 100  # the latency threshold
    assert result.receipt.spent_micros == PRIMARY.max_attempt_cost_micros + 1_000  # both charged
    assert dict(provider.hits) == {"private-primary": 1, "external-fallback": 1}
    assert [g.snapshot.guard.value for g in result.receipt.gates] == ["hedge_budget"]
    assert replay(result.receipt_json).ok
    by_ordinal = {a[v.ATTEMPT_ORDINAL.key]: a for a in _span_attrs(spans, "attempt")}
    assert by_ordinal[1][v.HEDGE_RESULT_KEY] == "cancelled"
    assert by_ordinal[2][v.HEDGE_RESULT_KEY] == "winner"
    assert by_ordinal[2][v.HEDGE_OWNER_KEY] == "harness"


def test_a_fast_primary_is_not_hedged(provider: Provider, spans: Any) -> None:
    provider.behaviour = {"private-primary": (200, 0.0)}

    async def main() -> RunResult:
        async with httpx.AsyncClient(timeout=10) as client:
            controller = AsyncRetryController(HEDGED, tracer_provider=spans.provider)
            return await controller.run(_http_call(client, provider.url), timeout_ms=30_000, **RUN)

    result = asyncio.run(main())
    assert result.terminal is Terminal.COMPLETE
    assert [a.hedge_ordinal for a in result.receipt.attempts] == [0]
    assert dict(provider.hits) == {"private-primary": 1}


def test_a_late_result_is_kept_as_evidence_and_never_used(spans: Any) -> None:
    """The primary answers just after the hedge won: its result is recorded (``late``),
    charged, and not returned."""

    async def main() -> RunResult:
        won = asyncio.Event()

        async def call(d: Dispatch) -> CallResult:
            if d.hedge_ordinal == 1:
                won.set()
                return CallResult(value="hedge", cost_actual_micros=10)
            await won.wait()
            return CallResult(value="primary, too late", cost_actual_micros=20)

        controller = AsyncRetryController(HEDGED, tracer_provider=spans.provider)
        return await controller.run(call, timeout_ms=30_000, **RUN)

    result = asyncio.run(main())
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "hedge")
    first, hedge = result.receipt.attempts
    assert (first.hedge_result, first.cancelled, first.cost_actual_micros) == (
        HedgeResult.LATE,
        False,
        20,
    )
    assert hedge.hedge_result is HedgeResult.WINNER
    assert result.receipt.spent_micros == 30
    assert replay(result.receipt_json).ok


def test_a_hedge_race_is_journaled_attempt_by_attempt(provider: Provider, tmp_path: Any) -> None:
    from retryscope.control._journal import EventKind, Journal
    from retryscope.control._lab import IDEMPOTENCY

    provider.behaviour = {"private-primary": (200, 1.0), "external-fallback": (200, 0.01)}

    async def main(journal: Journal) -> RunResult:
        async with httpx.AsyncClient(timeout=10) as client:
            controller = AsyncRetryController(HEDGED, journal)
            return await controller.run(_http_call(client, provider.url), timeout_ms=30_000, **RUN)

    with Journal(tmp_path / "j.sqlite") as journal:
        result = asyncio.run(main(journal))
        kinds = [e.kind for e in journal.verify(IDEMPOTENCY)]  # the order check passes
    assert result.terminal is Terminal.COMPLETE
    assert kinds[:5] == [
        EventKind.LOGICAL_REQUEST_CREATED,
        EventKind.ATTEMPT_RESERVED,
        EventKind.ATTEMPT_DISPATCHED,
        EventKind.ROUTE_GATED,  # the hedge budget's verdict while attempt 1 is in flight
        EventKind.ATTEMPT_RESERVED,
    ]
    assert kinds.count(EventKind.ATTEMPT_OBSERVED) == 2
    assert kinds[-1] is EventKind.TERMINAL_COMMITTED


def test_a_second_hedge_waits_for_its_own_threshold_when_the_first_fails_before_it(
    spans: Any,
) -> None:
    """Hedges are due at 100 and 200 ms after the primary starts; the first hedge fails at
    about 170 ms: the second still starts at 200 ms, and every attempt is accounted."""
    policy = replace(
        reference_policy(),
        routes=(PRIMARY, replace(FALLBACK, max_attempts=2)),
        hedging=HedgePolicy(
            route_id=FALLBACK.route_id, delay_ms=100, max_hedges=2, budget_percent=100,
            min_hedge_concurrency=2,
        ),
    )  # fmt: skip

    async def main() -> RunResult:
        async def call(d: Dispatch) -> CallResult:
            if d.hedge_ordinal == 0:
                await asyncio.Event().wait()  # the primary hangs until it is cancelled
            if d.hedge_ordinal == 1:
                await asyncio.sleep(0.07)
                return CallResult(kind=OutcomeKind.UNAVAILABLE)
            return CallResult(value="second hedge")

        controller = AsyncRetryController(policy, tracer_provider=spans.provider)
        return await controller.run(call, timeout_ms=30_000, **RUN)

    result = asyncio.run(main())
    assert (result.terminal, result.value) == (Terminal.COMPLETE, "second hedge")
    first, failed, second = result.receipt.attempts
    assert [a.hedge_ordinal for a in result.receipt.attempts] == [0, 1, 2]
    assert (first.hedge_result, first.cancelled) == (HedgeResult.CANCELLED, True)
    assert (failed.hedge_result, failed.outcome_kind) == (None, OutcomeKind.UNAVAILABLE)
    assert second.hedge_result is HedgeResult.WINNER
    assert second.start_ms >= first.start_ms + 200
    assert replay(result.receipt_json).ok
