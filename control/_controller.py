"""``RetryController`` and ``AsyncRetryController``: one policy, many requests, one owner.

A controller is built once per policy (validated once) and runs any number of requests;
each :meth:`run` binds the request's digests and absolute deadline at admission (an
:class:`~._policy.Admission`). Every request of a controller shares its
:class:`~._shared.SharedState` — the retry budget, the per-route circuit breakers and the
hedge budget — so an asyncio harness serving many requests at once is protected as a
whole.

Both controllers run the same program (:mod:`._program`): before every dispatch the
evaluator says what the policy allows (route, ordinals, delay, not_before, reservation, or
a terminal), the shared guards are asked and their verdicts recorded, the controller
sleeps until ``not_before``, reserves the route's worst-case cost, makes
``attempt_dispatched`` durable (with a journal), calls, classifies what it observed and
commits the evaluator's decision. They differ only in how they call and sleep: the sync
one blocks, the async one awaits (and can race hedges). Spans go through the context API:
one logical request span (policy digest and document, deadline, terminal, the guards'
verdicts as events) and one attempt span per dispatch with route, release, ordinals,
backoff, Retry-After, not_before, deadline remaining, cost, outcome, decision and the
guards' snapshots.

The callable receives a :class:`~._calls.Dispatch` and returns a value (success), a
:class:`~._calls.CallResult`, a :class:`~._calls.Submitted` job, or raises
:class:`~._calls.AttemptFailed` with a typed kind; any other exception is classified
conservatively (connection refused → ``unavailable``, anything else →
``unknown_provider_acceptance``). Cancelling the task awaiting
:meth:`AsyncRetryController.run` cancels the attempt in flight, which is recorded
(``stop_cancelled``) before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Required, TypedDict, Unpack

from opentelemetry import trace

from retryscope.canonical import canonical_json
from retryscope.control._calls import Dispatch, Job, RunResult
from retryscope.control._capability import capability_sha256
from retryscope.control._commit import StreamEvent
from retryscope.control._journal import Journal, PendingDispatch
from retryscope.control._policy import (
    DEFAULT_ACCEPTED_OWNERS,
    Admission,
    InvalidProtection,
    RetryPolicy,
    policy_to_obj,
    validate_admission,
    validate_policy,
)
from retryscope.control._program import (
    Call,
    Cancel,
    DriverError,
    Effect,
    Request,
    RequestRun,
    Setup,
    Sleep,
    Spawn,
    WaitFirst,
    adrive,
    drive,
)
from retryscope.control._receipts import policy_sha256
from retryscope.control._shared import SharedState
from retryscope.instrumentation import (
    digest_key_id,
    idempotency_digest,
    idempotency_sha256,
    request_digest,
    request_sha256,
)
from retryscope.vocabulary import RetryOwner

_NS_PER_MS: Final = 1_000_000


class RunArguments(TypedDict, total=False):
    """The request one run admits (see :meth:`RetryController.run`)."""

    request: Required[Any]
    idempotency_key: Required[str]
    operation: Required[str]
    tenant: str | None
    logical_request_id: str | None
    deadline_ms: int | None
    timeout_ms: int | None
    stream: Callable[[StreamEvent], None] | None


class _Controller:
    """What both controllers share: the validated policy, its shared state, the setup."""

    def __init__(
        self,
        policy: RetryPolicy,
        journal: Journal | None = None,
        *,
        clock: Callable[[], int] = time.time_ns,
        reconcile: Callable[[PendingDispatch], Any] | None = None,
        poll: Callable[[Job], Any] | None = None,
        shared: SharedState | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        currency: str = "USD",
        holder: str | None = None,
        lease_ttl_ms: int = 30_000,
        accepted_owners: frozenset[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
        on_result: Callable[[RunResult], None] | None = None,
        class_names: Mapping[str, str] | None = None,
    ) -> None:
        """``class_names``: a readable name of the policy's capability contract and behavior
        class digests (by digest), recorded beside them on the spans; the policy and its
        digest do not change with it."""
        self.policy = validate_policy(policy, accepted_owners=accepted_owners)
        self.policy_sha256 = policy_sha256(policy)
        if shared is not None and shared.policy != policy:
            raise ValueError("shared state belongs to another policy")
        self.shared = shared or SharedState(policy)
        self.journal = journal
        self.clock = clock
        self._setup = Setup(
            policy=policy,
            policy_sha256=self.policy_sha256,
            policy_document=canonical_json(policy_to_obj(policy), integers_only=True).decode(),
            capability_sha256=capability_sha256(policy.capability),
            journal=journal,
            clock=clock,
            tracer_provider=tracer_provider,
            currency=currency,
            holder=holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            lease_ttl_ms=lease_ttl_ms,
            accepted_owners=accepted_owners,
            shared=self.shared,
            reconcile=reconcile,
            poll=poll,
            on_result=on_result,
            class_names=dict(class_names or {}),
        )

    def admit(
        self,
        *,
        request: Any,
        idempotency_key: str,
        operation: str,
        tenant: str | None = None,
        deadline_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> Admission:
        """Bind one request: its payload and key digests and its absolute deadline (given,
        or ``timeout_ms`` from now). Checked against the policy (behavior evidence must
        hold until the deadline) before anything is dispatched."""
        if (deadline_ms is None) == (timeout_ms is None):
            raise ValueError("give exactly one of deadline_ms (absolute) or timeout_ms")
        if deadline_ms is None:
            assert timeout_ms is not None
            deadline_ms = self.clock() // _NS_PER_MS + timeout_ms
        admission = Admission(
            logical_request_sha256=request_sha256(request),
            idempotency_key_sha256=idempotency_sha256(tenant or "", operation, idempotency_key),
            deadline_ms=deadline_ms,
        )
        return validate_admission(self.policy, admission)

    def _request(self, call: Callable[[Dispatch], Any], args: RunArguments) -> RequestRun:
        admission = self.admit(
            request=args["request"],
            idempotency_key=args["idempotency_key"],
            operation=args["operation"],
            tenant=args.get("tenant"),
            deadline_ms=args.get("deadline_ms"),
            timeout_ms=args.get("timeout_ms"),
        )
        return RequestRun(
            self._setup,
            Request(
                admission=admission,
                idempotency_key=args["idempotency_key"],
                operation=args["operation"],
                tenant=args.get("tenant"),
                logical_request_id=args.get("logical_request_id"),
                call=call,
                sink=args.get("stream"),
                span_digests=(
                    idempotency_digest(
                        args.get("tenant") or "", args["operation"], args["idempotency_key"]
                    ),
                    request_digest(args["request"]),
                ),
                span_key_id=digest_key_id(),
            ),
        )


class RetryController(_Controller):
    """Owns retries for one policy, blocking. ``clock`` (unix ns) and ``sleep`` (seconds)
    are injectable; hedging needs :class:`AsyncRetryController`."""

    def __init__(
        self,
        policy: RetryPolicy,
        journal: Journal | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        **kw: Any,
    ) -> None:
        super().__init__(policy, journal, **kw)
        if policy.hedging is not None:
            raise InvalidProtection(
                "hedging", "a hedge races the attempt it hedges: run it with AsyncRetryController"
            )
        self.sleep = sleep

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Sleep):
            self.sleep(effect.seconds)
            return None
        if isinstance(effect, Call):
            result = effect.fn(effect.arg)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise DriverError("an async callable needs AsyncRetryController")
            return result
        raise DriverError(f"{type(effect).__name__} needs AsyncRetryController")

    def run(self, call: Callable[[Dispatch], Any], **request: Unpack[RunArguments]) -> RunResult:
        """Run ``call`` under the policy until a terminal; see the module docstring.

        ``request``: the payload (digested at admission), ``idempotency_key`` (the raw key
        the call sends; spans carry its digest), ``operation``, optional ``tenant`` and
        ``logical_request_id``, the deadline — absolute (``deadline_ms``) or ``timeout_ms``
        from admission — and ``stream``, the sink of the commit protocol's events for
        output the call streams through ``dispatch.stream``. With a journal, a request
        interrupted earlier is recovered first (a dispatch without outcome is reconciled —
        polled, never resubmitted); a request already terminal is not run again.
        """
        return drive(self._request(call, request).program(), self._perform)


class AsyncRetryController(_Controller):
    """Owns retries for one policy in asyncio; ``sleep`` is awaited (``asyncio.sleep`` by
    default). ``call``, ``reconcile`` and ``poll`` may be coroutine functions or plain
    functions. Hedges race as tasks of the running loop."""

    def __init__(
        self,
        policy: RetryPolicy,
        journal: Journal | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **kw: Any,
    ) -> None:
        super().__init__(policy, journal, **kw)
        self.sleep = sleep

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Sleep):
            await self.sleep(effect.seconds)
            return None
        if isinstance(effect, Call):
            result = effect.fn(effect.arg)
            return await result if inspect.isawaitable(result) else result
        if isinstance(effect, Spawn):
            return asyncio.ensure_future(adrive(effect.program, self._perform))
        if isinstance(effect, WaitFirst):
            waiting: set[asyncio.Future[Any]] = set(effect.handles)
            timer = (
                None
                if effect.seconds is None
                else asyncio.ensure_future(self.sleep(effect.seconds))
            )
            try:
                done, _ = await asyncio.wait(
                    waiting | ({timer} if timer is not None else set()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                if timer is not None and not timer.done():
                    timer.cancel()
            return tuple(h for h in effect.handles if h in done)
        if isinstance(effect, Cancel):
            for handle in effect.handles:
                handle.cancel()
            await asyncio.gather(*effect.handles, return_exceptions=True)
            return None
        raise DriverError(f"unknown effect {effect!r}")

    async def run(
        self, call: Callable[[Dispatch], Any], **request: Unpack[RunArguments]
    ) -> RunResult:
        """The async :meth:`RetryController.run` (same arguments, same receipts)."""
        return await adrive(self._request(call, request).program(), self._perform)
