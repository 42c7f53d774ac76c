"""``RetryController``: run real callables under the evaluator, with spans and a journal.

The controller is the single retry owner. Before every dispatch it asks
:func:`~retryscope.instrumentation.control._evaluator.evaluate` what the policy allows (route,
ordinals, delay, not_before, reservation, or a terminal), sleeps until ``not_before``,
reserves the route's worst-case cost, makes ``attempt_dispatched`` durable (when a journal
is given), calls, classifies what it observed, and commits the evaluator's decision. It
emits the foundation's spans through the context API: one logical request span (policy
digest, deadline, terminal) and one attempt span per dispatch with route, route release
(the route's ``route_release_sha256``), ordinals, backoff delay, Retry-After, not_before,
deadline remaining, cost reserve/commit, outcome, decision.

The callable receives a :class:`Dispatch` and returns a value (success), a
:class:`CallResult`, or raises :class:`AttemptFailed` with a typed kind; any other
exception is classified conservatively (connection refused → ``unavailable``, anything
else → ``unknown_provider_acceptance``). Nothing in a failure — body or message — chooses a
route, URL, model or delay: only the policy's plan does.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace

from retryscope import vocabulary as v
from retryscope.instrumentation._classify import classify_exception, error_type
from retryscope.instrumentation._context import Attempt, Clock, LogicalRequest, logical_request
from retryscope.instrumentation._digests import idempotency_sha256, request_sha256
from retryscope.instrumentation._redaction import record_exception
from retryscope.instrumentation.control._evaluator import (
    IdempotencyDrift,
    ObservedAttempt,
    PlannedAttempt,
    Receipt,
    RequestDrift,
    evaluate,
)
from retryscope.instrumentation.control._journal import (
    EventKind,
    Journal,
    Lease,
    Reconcile,
    ReconcileRequired,
)
from retryscope.instrumentation.control._policy import (
    DEFAULT_ACCEPTED_OWNERS,
    FallbackRoute,
    RetryPolicy,
    validate_policy,
)
from retryscope.instrumentation.control._receipts import (
    attempt_to_obj,
    policy_sha256,
    receipt_json,
    receipt_sha256,
)
from retryscope.instrumentation.control._schedule import bounded_hint_ms
from retryscope.vocabulary import Outcome, OutcomeKind, RetryOwner, Terminal

_NS_PER_MS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What one attempt may use. ``idempotency_key`` is the raw key to send to the receiver
    (it stays in process; spans carry only its digest)."""

    route: FallbackRoute
    attempt_ordinal: int
    route_attempt_ordinal: int
    idempotency_key: str
    deadline_remaining_ms: int
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class CallResult:
    """An explicit observation: ``kind`` None is a success carrying ``value``."""

    kind: OutcomeKind | None = None
    value: Any = None
    retry_after_ms: int | None = None
    cost_actual_micros: int | None = None
    http_status: int | None = None
    error: str | None = None


class AttemptFailed(Exception):
    """Raised by a callable to report a typed failure."""

    def __init__(
        self,
        kind: OutcomeKind,
        *,
        retry_after_ms: int | None = None,
        cost_actual_micros: int | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(kind.value)
        self.result = CallResult(
            kind=kind,
            retry_after_ms=retry_after_ms,
            cost_actual_micros=cost_actual_micros,
            http_status=http_status,
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    """How the logical request ended; ``value`` is the successful call's value."""

    terminal: Terminal
    value: Any
    receipt: Receipt
    receipt_json: bytes
    logical_request_id: str


class RetryController:
    """Owns retries for one policy. Clock (unix ns) and sleep (seconds) are injectable."""

    def __init__(
        self,
        policy: RetryPolicy,
        journal: Journal | None = None,
        *,
        clock: Clock = time.time_ns,
        sleep: Callable[[float], None] = time.sleep,
        reconcile: Reconcile | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        currency: str = "USD",
        holder: str | None = None,
        lease_ttl_ms: int = 30_000,
        accepted_owners: frozenset[RetryOwner] = DEFAULT_ACCEPTED_OWNERS,
    ) -> None:
        self.policy = validate_policy(policy, accepted_owners=accepted_owners)
        self.policy_sha256 = policy_sha256(policy)
        self.journal = journal
        self.clock = clock
        self.sleep = sleep
        self.reconcile = reconcile
        self.tracer_provider = tracer_provider
        self.currency = currency
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_ttl_ms = lease_ttl_ms
        self.accepted_owners = accepted_owners
        self._lease: Lease | None = None

    def _now_ms(self) -> int:
        return self.clock() // _NS_PER_MS

    def _bind(self, request: Any, idempotency_key: str, operation: str, tenant: str | None) -> None:
        if request_sha256(request) != self.policy.logical_request_sha256:
            raise RequestDrift("request", "digest differs from the policy's logical request")
        if idempotency_sha256(tenant or "", operation, idempotency_key) != (
            self.policy.idempotency_key_sha256
        ):
            raise IdempotencyDrift("idempotency_key", "digest differs from the policy's key")

    def _append(self, kind: EventKind, body: dict[str, Any]) -> None:
        if self.journal is not None and self._lease is not None:
            self.journal.append(self._lease, kind, body)

    def run(
        self,
        call: Callable[[Dispatch], Any],
        *,
        request: Any,
        idempotency_key: str,
        operation: str,
        tenant: str | None = None,
        logical_request_id: str | None = None,
    ) -> RunResult:
        """Run ``call`` under the policy until a terminal; see the module docstring.

        With a journal, a request interrupted earlier is recovered first (its dispatch
        without outcome goes to ``reconcile``); a request already terminal is not re-run.
        """
        self._bind(request, idempotency_key, operation, tenant)
        attempts: list[ObservedAttempt] = []
        decided = 0
        if self.journal is not None:
            rec = self.journal.recover(
                self.policy.idempotency_key_sha256,
                self.holder,
                now_ms=self._now_ms(),
                ttl_ms=self.lease_ttl_ms,
                created={
                    "policy_sha256": self.policy_sha256,
                    "logical_request_digest": self.policy.logical_request_sha256,
                    "idempotency_digest": self.policy.idempotency_key_sha256,
                },
                reconcile=self.reconcile,
            )
            if rec.pending is not None:
                raise ReconcileRequired(
                    f"attempt {rec.pending.attempt_ordinal} is still in progress at the receiver"
                )
            self._lease = rec.lease
            attempts, decided = list(rec.attempts), rec.decided_through
            if rec.terminal is not None:  # already finished: never dispatch again
                done = evaluate(self.policy, attempts, accepted_owners=self.accepted_owners)
                return RunResult(
                    rec.terminal, None, done, receipt_json(done), logical_request_id or ""
                )
        with logical_request(
            operation=operation,
            tenant=tenant,
            idempotency_key=idempotency_key,
            request=request,
            deadline=self.policy.deadline_ms * _NS_PER_MS,
            retry_owner=self.policy.retry_owner,
            logical_request_id=logical_request_id,
            policy_digest=self.policy_sha256,
            tracer_provider=self.tracer_provider,
            clock=self.clock,
            attributes={
                v.REQUIRED_CAPABILITY_DIGEST.key: self.policy.capability_contract_sha256,
                v.REQUIRED_BEHAVIOR_CLASS.key: self.policy.behavior_class_sha256,
                v.MAX_DATA_BOUNDARY.key: self.policy.max_data_boundary.value,
            },
        ) as req:
            for a in attempts:
                req.count_prior_attempt(a.route_id)
            value: Any = None
            while True:
                receipt = evaluate(
                    self.policy,
                    attempts,
                    now_ms=self._now_ms(),
                    accepted_owners=self.accepted_owners,
                )
                for d in receipt.decisions[decided:]:
                    self._append(
                        EventKind.RETRY_DECISION_COMMITTED,
                        _decision_body(d.attempt_ordinal, d.decision.value),
                    )
                decided = len(receipt.decisions)
                if receipt.terminal is not None:
                    break
                plan = receipt.next_attempt
                if plan is None:  # evaluate always plans when there is no terminal
                    raise RuntimeError("evaluator returned neither a terminal nor a plan")
                wait_ms = (plan.not_before_ms or 0) - self._now_ms()
                if wait_ms > 0:
                    self.sleep(wait_ms / 1000)
                    continue
                observed, result = self._dispatch(req, call, plan, idempotency_key, attempts)
                attempts.append(observed)
                if observed.outcome is Outcome.SUCCESS:
                    value = result.value
                decided = len(attempts)
            terminal = receipt.terminal
            timeless = evaluate(self.policy, attempts, accepted_owners=self.accepted_owners)
            if timeless.terminal is terminal:  # the terminal did not depend on "now"
                receipt = timeless
            self._append(
                EventKind.TERMINAL_COMMITTED,
                {"terminal": terminal.value, "receipt_sha256": receipt_sha256(receipt)},
            )
            req.set_terminal(terminal)
        return RunResult(
            terminal=terminal,
            value=value if terminal is Terminal.COMPLETE else None,
            receipt=receipt,
            receipt_json=receipt_json(receipt),
            logical_request_id=req.id,
        )

    def _dispatch(
        self,
        req: LogicalRequest,
        call: Callable[[Dispatch], Any],
        plan: PlannedAttempt,
        idempotency_key: str,
        prior: list[ObservedAttempt],
    ) -> tuple[ObservedAttempt, CallResult]:
        route = plan.route
        if self.journal is not None and self._lease is not None:
            self._lease = self.journal.renew(
                self._lease, now_ms=self._now_ms(), ttl_ms=self.lease_ttl_ms
            )
        self._append(
            EventKind.ATTEMPT_RESERVED,
            {
                "attempt_ordinal": plan.attempt_ordinal,
                "route_id": route.route_id,
                "route_attempt_ordinal": plan.route_attempt_ordinal,
                "reserve_micros": plan.reserve_micros,
                "not_before_ms": plan.not_before_ms,
                "delay_ms": plan.delay_ms,
            },
        )
        with req.attempt(
            route.route_id,
            route_release=route.route_release_sha256,
            route_priority=route.priority,
            attributes={
                v.ROUTE_CAPABILITY_DIGEST.key: route.capability_contract_sha256,
                v.ROUTE_BEHAVIOR_CLASS.key: route.behavior_class_sha256,
                v.ROUTE_DATA_BOUNDARY.key: route.data_boundary.value,
            },
        ) as att:
            if (att.ordinal, att.route_ordinal) != (
                plan.attempt_ordinal,
                plan.route_attempt_ordinal,
            ):
                raise RuntimeError(
                    f"span ordinals {att.ordinal}/{att.route_ordinal} differ from the plan "
                    f"{plan.attempt_ordinal}/{plan.route_attempt_ordinal}"
                )
            start_ms = (att.started_at or self.clock()) // _NS_PER_MS
            att.set_backoff(
                delay_ms=plan.delay_ms,
                retry_after_ms=plan.retry_after_ms,
                not_before=None if plan.not_before_ms is None else plan.not_before_ms * _NS_PER_MS,
            )
            att.set_cost(reserved=plan.reserve_micros, currency=self.currency, estimated=True)
            self._append(
                EventKind.ATTEMPT_DISPATCHED,
                {
                    "attempt_ordinal": plan.attempt_ordinal,
                    "route_id": route.route_id,
                    "route_release": route.route_release_sha256,
                    "logical_request_digest": self.policy.logical_request_sha256,
                    "dispatched_at_ms": start_ms,
                },
            )
            remaining = self.policy.deadline_ms - start_ms
            result = self._call(
                call,
                att,
                Dispatch(
                    route,
                    plan.attempt_ordinal,
                    plan.route_attempt_ordinal,
                    idempotency_key,
                    remaining,
                    att,
                ),
            )
            end_ms = self._now_ms()
            if result.kind is None:
                att.set_outcome(Outcome.SUCCESS, http_status=result.http_status)
            else:
                att.set_outcome(result.kind, error=result.error, http_status=result.http_status)
            att.set_cost(
                reserved=plan.reserve_micros,
                actual=result.cost_actual_micros,
                currency=self.currency,
            )
            observed = ObservedAttempt(
                route_id=route.route_id,
                route_release=route.route_release_sha256,
                route_attempt_ordinal=plan.route_attempt_ordinal,
                attempt_ordinal=plan.attempt_ordinal,
                logical_request_digest=self.policy.logical_request_sha256,
                idempotency_digest=self.policy.idempotency_key_sha256,
                start_ms=start_ms,
                end_ms=end_ms,
                outcome=Outcome.SUCCESS if result.kind is None else result.kind.family,
                outcome_kind=result.kind,
                not_before_ms=plan.not_before_ms,
                backoff_delay_ms=plan.delay_ms,
                retry_after_ms=(
                    None
                    if result.retry_after_ms is None
                    else bounded_hint_ms(result.retry_after_ms, self.policy.max_retry_after_ms)
                ),
                cost_reserved_micros=plan.reserve_micros,
                cost_actual_micros=result.cost_actual_micros,
            )
            self._append(
                EventKind.ATTEMPT_OBSERVED,
                {"attempt": attempt_to_obj(observed), "reconciled": None},
            )
            receipt = evaluate(
                self.policy, [*prior, observed], accepted_owners=self.accepted_owners
            )
            decision = receipt.decisions[-1].decision
            att.set_decision(decision)
            self._append(
                EventKind.RETRY_DECISION_COMMITTED,
                _decision_body(plan.attempt_ordinal, decision.value),
            )
        return observed, result

    def _call(
        self, call: Callable[[Dispatch], Any], att: Attempt, dispatch: Dispatch
    ) -> CallResult:
        try:
            raw = call(dispatch)
        except AttemptFailed as exc:
            record_exception(att.span, exc)
            return exc.result
        except Exception as exc:  # any escape is an observation, classified conservatively
            record_exception(att.span, exc)
            # what the call already observed on the attempt (e.g. the streaming wrapper's
            # stream_interrupted_after_output) outranks a guess from the exception's type
            kind = att.kind if att.kind is not None else classify_exception(exc)
            return CallResult(kind=kind, error=error_type(exc))
        return raw if isinstance(raw, CallResult) else CallResult(value=raw)


def _decision_body(attempt_ordinal: int, decision: str) -> dict[str, Any]:
    return {"attempt_ordinal": attempt_ordinal, "decision": decision}
