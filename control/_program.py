"""The one program both controllers run: a request from admission to its terminal.

Everything a controller does except calling and sleeping lives here, once: recovering the
journal, reconciling a dispatch left without outcome (an attempt span of its own, polled
within the policy's polling bounds), asking the evaluator what comes next, consulting the
shared guards and recording their verdicts, reserving, dispatching, classifying,
committing decisions, racing hedges, streaming under the commit protocol, and the
terminal. The program is a generator of *effects* — :class:`Sleep`, :class:`Call` and,
for hedge races, :class:`Spawn`, :class:`WaitFirst`, :class:`Cancel` — which a driver
performs: :func:`drive` (blocking) for :class:`~._controller.RetryController`, :func:`adrive`
(awaiting) for :class:`~._controller.AsyncRetryController`. An exception a driver meets
performing an effect is thrown back into the program at that point, so a caller's
cancellation (``asyncio.CancelledError``) reaches the attempt in flight, which records
itself as cancelled before the cancellation continues.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.control._calls import (
    AttemptFailed,
    CallResult,
    Dispatch,
    Job,
    Pending,
    RunResult,
    Submitted,
)
from retryscope.control._capability import capability_sha256
from retryscope.control._commit import AttemptStream, CommitLog, StreamEvent
from retryscope.control._evaluator import (
    ObservedAttempt,
    Receipt,
    evaluate,
    gate_key,
    race_results,
)
from retryscope.control._guards import Gate, GuardKind
from retryscope.control._journal import (
    EventKind,
    Journal,
    Lease,
    PendingDispatch,
    ReceiverStatus,
    ReconcileRequired,
    Reconciliation,
    reconciled_attempt,
)
from retryscope.control._policy import Admission, FallbackRoute, RetryPolicy
from retryscope.control._receipts import gate_to_obj, receipt_json, receipt_sha256
from retryscope.control._schedule import (
    PlannedAttempt,
    bounded_hint_ms,
    hedge_step,
    next_poll_ms,
)
from retryscope.control._shared import Pass, SharedState
from retryscope.control._strict import to_obj
from retryscope.instrumentation import (
    Attempt,
    LogicalRequest,
    classify_exception,
    error_type,
    record_exception,
)
from retryscope.vocabulary import (
    HedgeResult,
    Outcome,
    OutcomeKind,
    ReconciliationMethod,
    ReconciliationResult,
    RetryOwner,
    Terminal,
)

T = TypeVar("T")
_NS_PER_MS: Final = 1_000_000
_ENDS_AT: Final[contextvars.ContextVar[int | None]] = contextvars.ContextVar(
    "retryscope_attempt_ends_at", default=None
)


class _EndsAt:
    """Pins the spans' clock, in this task, to when the attempt observed its outcome, so its
    span ends exactly then and the telemetry shows the times the evaluator decided on."""

    def __enter__(self) -> _EndsAt:
        self._token: contextvars.Token[int | None] | None = None
        return self

    def pin(self, ns: int) -> None:
        self._token = _ENDS_AT.set(ns)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ENDS_AT.reset(self._token)


# --- effects -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Call:
    """Call ``fn(arg)`` (awaiting it when it returns an awaitable, in the async driver)."""

    fn: Callable[[Any], Any]
    arg: Any


@dataclass(frozen=True, slots=True)
class Spawn:
    """Run ``program`` concurrently; the driver answers with a handle."""

    program: Program[Any]


@dataclass(frozen=True, slots=True)
class WaitFirst:
    """Wait until one of ``handles`` is done or ``seconds`` passed; answers the done ones."""

    handles: tuple[Any, ...]
    seconds: float | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel ``handles`` and wait until each has finished."""

    handles: tuple[Any, ...]


Effect = Sleep | Call | Spawn | WaitFirst | Cancel
Program = Generator[Effect, Any, T]


class DriverError(TypeError):
    """An effect this driver cannot perform (a coroutine for the blocking driver, a hedge
    race without an event loop): a programming error, never an attempt's observation."""


def drive(program: Program[T], perform: Callable[[Effect], Any]) -> T:
    """Run ``program`` to its end, performing each effect with ``perform`` (blocking)."""
    send: Any = None
    throw: BaseException | None = None
    while True:
        try:
            effect = program.send(send) if throw is None else program.throw(throw)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        send, throw = None, None
        try:
            send = perform(effect)
        except DriverError:
            program.close()
            raise
        except BaseException as exc:  # back into the program, where it happened
            throw = exc


async def adrive(program: Program[T], perform: Callable[[Effect], Awaitable[Any]]) -> T:
    """Run ``program`` to its end, awaiting each effect with ``perform``."""
    send: Any = None
    throw: BaseException | None = None
    while True:
        try:
            effect = program.send(send) if throw is None else program.throw(throw)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        send, throw = None, None
        try:
            send = await perform(effect)
        except BaseException as exc:  # back into the program, where it happened
            throw = exc


# --- what a controller holds for all its requests -------------------------------------------
@dataclass(frozen=True, slots=True)
class Setup:
    """A controller's settings, shared by every request it runs."""

    policy: RetryPolicy
    policy_sha256: str
    policy_document: str
    capability_sha256: str
    journal: Journal | None
    clock: Callable[[], int]
    tracer_provider: Any
    currency: str
    holder: str
    lease_ttl_ms: int
    accepted_owners: frozenset[RetryOwner]
    shared: SharedState
    reconcile: Callable[[PendingDispatch], Any] | None
    poll: Callable[[Job], Any] | None
    on_result: Callable[[RunResult], None] | None
    class_names: dict[str, str]
    """A readable name of a capability or behavior class digest, by digest."""

    def names(self, *recorded: tuple[v.Attr, str]) -> dict[str, AttributeValue]:
        """The name attribute of each (name attribute, digest) whose digest has a name."""
        return {a.key: self.class_names[d] for a, d in recorded if d in self.class_names}


@dataclass(frozen=True, slots=True)
class Request:
    """One admitted request: what the caller gave besides the policy."""

    admission: Admission
    idempotency_key: str
    operation: str
    tenant: str | None
    logical_request_id: str | None
    call: Callable[[Dispatch], Any]
    sink: Callable[[StreamEvent], None] | None
    span_digests: tuple[str | None, str | None] = (None, None)
    """The digests its request span records (idempotency, request): keyed under the
    deployment key when one is set; the admission holds the plain SHA-256 pins."""
    span_key_id: str | None = None


_GUARD_KEYS: Final[dict[GuardKind, tuple[str, str, str]]] = {
    GuardKind.BREAKER: (v.BREAKER_STATE.key, v.BREAKER_GENERATION_KEY, v.BREAKER_TOKENS_KEY),
    GuardKind.RETRY_BUDGET: (
        v.RETRY_BUDGET_STATE_KEY,
        v.RETRY_BUDGET_GENERATION_KEY,
        v.RETRY_BUDGET_TOKENS_KEY,
    ),
    GuardKind.HEDGE_BUDGET: (
        v.HEDGE_BUDGET_STATE_KEY,
        v.HEDGE_BUDGET_GENERATION_KEY,
        v.HEDGE_BUDGET_TOKENS_KEY,
    ),
}
_RESULT_OF: Final[dict[ReceiverStatus, ReconciliationResult]] = {
    ReceiverStatus.SUCCEEDED: ReconciliationResult.EFFECT_CONFIRMED,
    ReceiverStatus.FAILED_NO_EFFECT: ReconciliationResult.NO_EFFECT,
    ReceiverStatus.INDETERMINATE: ReconciliationResult.UNKNOWN,
}
_ROUTE_FAILED: Final[dict[Outcome, bool]] = {
    Outcome.SUCCESS: False,
    Outcome.NON_RETRYABLE: False,  # the route answered: a bad request says nothing of it
    Outcome.RETRYABLE: True,
    Outcome.INDETERMINATE: True,
}


class _Race:
    """A hedge race in progress: who started when, who won, what each attempt observed."""

    def __init__(self) -> None:
        self.first_start_ms: int | None = None
        self.winner: int | None = None
        self.members = 1
        self.value: Any = None
        self.observed: dict[int, ObservedAttempt] = {}

    def finished(self, ordinal: int, *, success: bool, cancelled: bool) -> HedgeResult | None:
        """How the attempt leaves the race, decided as its result arrives (a first attempt
        that answers before any hedge started was never in a race: no result)."""
        if cancelled:
            return HedgeResult.CANCELLED if self.winner is not None else None
        if self.winner is not None:
            return HedgeResult.LATE
        if success:
            self.winner = ordinal
            return HedgeResult.WINNER if self.members > 1 else None
        return None


class RequestRun:
    """The program of one request (see the module docstring)."""

    def __init__(self, setup: Setup, request: Request) -> None:
        self.s = setup
        self.r = request
        self.attempts: list[ObservedAttempt] = []
        self.gates: list[Gate] = []
        self.decided: set[int] = set()
        self.passes: dict[tuple[int, int | None], list[Pass]] = {}
        self.value: Any = None
        self.lease: Lease | None = None
        self.unsettled: set[int] = set()
        """Journaled dispatches still being reconciled: no terminal while any is left."""
        self.req: LogicalRequest | None = None
        self.log: CommitLog | None = None

    # -- small helpers --------------------------------------------------------------------
    def _now_ms(self) -> int:
        return self.s.clock() // _NS_PER_MS

    def _span_clock(self) -> int:
        pinned = _ENDS_AT.get()
        return self.s.clock() if pinned is None else pinned

    def _append(self, kind: EventKind, body: dict[str, Any]) -> None:
        if self.s.journal is not None and self.lease is not None:
            self.s.journal.append(self.lease, kind, body)

    def _evaluate(
        self,
        extra: tuple[ObservedAttempt, ...] = (),
        *,
        now_ms: int | None = None,
        cancelled_at_ms: int | None = None,
    ) -> Receipt:
        return evaluate(
            self.s.policy,
            self.r.admission,
            sorted([*self.attempts, *extra], key=lambda a: a.attempt_ordinal),
            gates=self.gates,
            now_ms=now_ms,
            cancelled_at_ms=cancelled_at_ms,
            accepted_owners=self.s.accepted_owners,
        )

    def _commit_decisions(self, receipt: Receipt) -> None:
        for d in receipt.decisions:
            if d.attempt_ordinal not in self.decided:
                self.decided.add(d.attempt_ordinal)
                self._append(
                    EventKind.RETRY_DECISION_COMMITTED,
                    {"attempt_ordinal": d.attempt_ordinal, "decision": d.decision.value},
                )

    def _result(self, terminal: Terminal, value: Any, receipt: Receipt, rid: str) -> RunResult:
        result = RunResult(terminal, value, receipt, receipt_json(receipt), rid)
        if self.s.on_result is not None:
            self.s.on_result(result)
        return result

    # -- the request ----------------------------------------------------------------------
    def program(self) -> Program[RunResult]:
        s, adm = self.s, self.r.admission
        rid = self.r.logical_request_id or uuid.uuid4().hex
        pending: tuple[PendingDispatch, ...] = ()
        if s.journal is not None:
            rec = s.journal.recover(
                adm.idempotency_key_sha256,
                s.holder,
                now_ms=self._now_ms(),
                ttl_ms=s.lease_ttl_ms,
                created={
                    "policy_sha256": s.policy_sha256,
                    "admission": to_obj(adm),
                    "logical_request_id": rid,
                },
            )
            self.lease, rid = rec.lease, rec.logical_request_id
            self.attempts, self.gates = list(rec.attempts), list(rec.gates)
            self.decided = {a.attempt_ordinal for a in rec.attempts} & set(
                range(1, rec.decided_through + 1)
            )
            if rec.terminal is not None:  # already finished: never dispatch again
                return self._result(rec.terminal, None, self._evaluate(), rid)
            pending = rec.pending
            unreachable = [p for p in pending if (s.poll if p.job_id else s.reconcile) is None]
            if unreachable:
                n = unreachable[0].attempt_ordinal
                raise ReconcileRequired(f"attempt {n} has no outcome and nothing to ask about it")
        from retryscope import __version__

        s.shared.request_started()
        try:
            with LogicalRequest(
                trace.get_tracer("retryscope", __version__, tracer_provider=s.tracer_provider),
                operation=self.r.operation,
                tenant=self.r.tenant,
                idempotency_key=None,
                request=None,
                deadline=adm.deadline_ms * _NS_PER_MS,
                retry_owner=s.policy.retry_owner,
                logical_request_id=rid,
                policy_digest=s.policy_sha256,
                clock=self._span_clock,
                digests=self.r.span_digests,
                carried_key_id=self.r.span_key_id,
                attributes={
                    v.REQUIRED_CAPABILITY_DIGEST.key: s.capability_sha256,
                    v.REQUIRED_BEHAVIOR_CLASS.key: s.policy.behavior_class_sha256,
                    v.MAX_DATA_BOUNDARY.key: s.policy.max_data_boundary.value,
                    v.POLICY_DOCUMENT.key: s.policy_document,
                    **s.names(
                        (v.REQUIRED_CAPABILITY_NAME, s.capability_sha256),
                        (v.REQUIRED_BEHAVIOR_CLASS_NAME, s.policy.behavior_class_sha256),
                    ),
                },
            ) as req:
                self.req = req
                if self.r.sink is not None:
                    self.log = CommitLog(rid)
                try:
                    yield from self._recover(pending)
                    yield from self._loop()
                except asyncio.CancelledError:
                    self._finish(rid, cancelled=True)
                    raise
                return self._finish(rid, cancelled=False)
        finally:
            for granted in [p for ps in self.passes.values() for p in ps]:
                s.shared.release(granted, failed=None, now_ms=self._now_ms())
            s.shared.request_finished()

    def _recover(self, pending: tuple[PendingDispatch, ...]) -> Program[None]:
        """Count what earlier processes observed, reconcile what they left in flight."""
        assert self.req is not None
        waiting = {p.attempt_ordinal: p for p in pending}
        self.unsettled = set(waiting)
        observed = {a.attempt_ordinal: a for a in self.attempts}
        settled: list[tuple[ObservedAttempt, ReceiverStatus]] = []
        for n in sorted(waiting.keys() | observed.keys()):
            if n in observed:
                self.req.count_prior_attempt(observed[n].route_id)
            else:
                settled.append((yield from self._reconcile(waiting[n])))
        everything = [*self.attempts, *(a for a, _ in settled)]
        if any(a.hedge_ordinal for a in everything):  # a hedge race was interrupted
            labels = race_results(a for a in everything if a.hedge_ordinal is not None)
            settled = [
                (replace(a, hedge_result=labels[a.attempt_ordinal]), st) for a, st in settled
            ]
        for a, status in settled:
            self._append(
                EventKind.ATTEMPT_OBSERVED,
                {"attempt": to_obj(a), "reconciled": status.value},
            )
            self.unsettled.discard(a.attempt_ordinal)
        self.attempts = sorted(
            [*self.attempts, *(a for a, _ in settled)], key=lambda a: a.attempt_ordinal
        )

    def _loop(self) -> Program[None]:
        while True:
            now = self._now_ms()
            receipt = self._evaluate(now_ms=now)
            self._commit_decisions(receipt)
            if receipt.terminal is not None:
                return
            plan = receipt.next_attempt
            if plan is None:  # evaluate always plans when there is no terminal
                raise RuntimeError("evaluator returned neither a terminal nor a plan")
            wait = (plan.not_before_ms or 0) - now
            if wait > 0:
                yield Sleep(wait / 1000)
                continue
            if self._consult(plan, now, None):
                continue
            policy = self.s.policy
            if (
                policy.hedging is not None
                and plan.attempt_ordinal == 1
                and plan.route.priority == 0
            ):
                yield from self._race(plan)
            else:
                yield from self._attempt(plan, None, None)

    def _finish(self, rid: str, *, cancelled: bool) -> RunResult:
        assert self.req is not None
        now = self._now_ms()
        cancelled_at = now if cancelled else None
        receipt = self._evaluate(now_ms=now, cancelled_at_ms=cancelled_at)
        terminal = receipt.terminal
        assert terminal is not None
        timeless = self._evaluate(cancelled_at_ms=cancelled_at)
        if timeless.terminal is terminal:  # the terminal did not depend on "now"
            receipt = timeless
        if not self.unsettled:  # else the request stays recoverable: reconciled next time
            self._commit_decisions(receipt)
            self._append(
                EventKind.TERMINAL_COMMITTED,
                {"terminal": terminal.value, "receipt_sha256": receipt_sha256(receipt)},
            )
        self.req.set_terminal(terminal)
        value = self.value if terminal is Terminal.COMPLETE else None
        return self._result(terminal, value, receipt, rid)

    # -- shared guards --------------------------------------------------------------------
    def _gated(self, gate: Gate) -> None:
        assert self.req is not None
        self.gates.append(gate)
        self._append(EventKind.ROUTE_GATED, gate_to_obj(gate))
        snap = gate.snapshot
        attrs: dict[str, AttributeValue] = {
            v.ROUTING_GUARD_KEY: snap.guard.value,
            v.ROUTING_ATTEMPT_KEY: gate.attempt_ordinal,
            v.ROUTING_ROUTE_KEY: gate.route_id,
            v.ROUTING_ADMITTED_KEY: gate.admitted,
            v.ROUTING_STATE_KEY: snap.state,
            v.ROUTING_GENERATION_KEY: snap.generation,
            v.ROUTING_TOKENS_KEY: snap.tokens,
        }
        if gate.hedge_ordinal is not None:
            attrs[v.HEDGE_ORDINAL.key] = gate.hedge_ordinal
        self.req.span.add_event(v.ROUTING_EVENT, attrs, timestamp=snap.at_ms * _NS_PER_MS)

    def _consult(self, plan: PlannedAttempt, now: int, hedge: int | None) -> bool | None:
        """Ask the next guard this dispatch has not asked yet. True: a new verdict was
        recorded (re-plan); False: every guard was asked; None: a hedge was refused."""
        ordinal, route = plan.attempt_ordinal, plan.route.route_id
        asked = {
            gate_key(g.attempt_ordinal, g.snapshot.guard, g.route_id, g.hedge_ordinal)
            for g in self.gates
        }
        if hedge is not None:
            guards: tuple[GuardKind, ...] = (GuardKind.HEDGE_BUDGET, GuardKind.BREAKER)
        elif ordinal > 1:
            guards = (GuardKind.RETRY_BUDGET, GuardKind.BREAKER)
        else:
            guards = (GuardKind.BREAKER,)
        for guard in guards:
            if gate_key(ordinal, guard, route, hedge) in asked:
                continue
            answer = self.s.shared.admit(guard, ordinal, route, now, hedge_ordinal=hedge)
            if answer is None:
                continue
            gate, granted = answer
            self._gated(gate)
            if granted is not None:
                self.passes.setdefault((ordinal, hedge), []).append(granted)
            elif hedge is not None:
                self._release(ordinal, hedge, failed=None)
                return None
            return True
        return False

    def _release(self, ordinal: int, hedge: int | None, *, failed: bool | None) -> None:
        for granted in self.passes.pop((ordinal, hedge), []):
            self.s.shared.release(granted, failed=failed, now_ms=self._now_ms())

    def _route_attributes(self, route: FallbackRoute) -> dict[str, AttributeValue]:
        """What an attempt span records of its route and of the contract it must meet."""
        return {
            v.ROUTE_CAPABILITY_DIGEST.key: self.s.capability_sha256,
            v.CAPABILITY_OFFERED_DIGEST_KEY: capability_sha256(route.capability),
            v.ROUTE_BEHAVIOR_CLASS.key: route.behavior_class_sha256,
            v.ROUTE_DATA_BOUNDARY.key: route.data_boundary.value,
            **self.s.names(
                (v.ROUTE_CAPABILITY_NAME, self.s.capability_sha256),
                (v.ROUTE_BEHAVIOR_CLASS_NAME, route.behavior_class_sha256),
            ),
        }

    def _guard_attributes(self, ordinal: int, hedge: int | None) -> dict[str, AttributeValue]:
        attrs: dict[str, AttributeValue] = {}
        for granted in self.passes.get((ordinal, hedge), []):
            snap = granted.gate.snapshot
            state, generation, tokens = _GUARD_KEYS[snap.guard]
            attrs.update({state: snap.state, generation: snap.generation, tokens: snap.tokens})
        return attrs

    # -- one attempt --------------------------------------------------------------------
    def _attempt(
        self, plan: PlannedAttempt, hedge: int | None, race: _Race | None
    ) -> Program[ObservedAttempt]:
        s, adm, req = self.s, self.r.admission, self.req
        assert req is not None
        route = plan.route
        if s.journal is not None and self.lease is not None:
            self.lease = s.journal.renew(self.lease, now_ms=self._now_ms(), ttl_ms=s.lease_ttl_ms)
        self._append(
            EventKind.ATTEMPT_RESERVED,
            {
                "attempt_ordinal": plan.attempt_ordinal,
                "route_id": route.route_id,
                "route_attempt_ordinal": plan.route_attempt_ordinal,
                "reserve_micros": plan.reserve_micros,
                "not_before_ms": plan.not_before_ms,
                "delay_ms": plan.delay_ms,
                "hedge_ordinal": hedge,
            },
        )
        attrs = self._route_attributes(route) | self._guard_attributes(plan.attempt_ordinal, hedge)
        cancel: BaseException | None = None
        with (
            _EndsAt() as ends,
            req.attempt(
                route.route_id,
                route_release=route.route_release_sha256,
                route_priority=route.priority,
                attributes=attrs,
                hedge_ordinal=hedge,
            ) as att,
        ):
            _check_ordinals(att, plan.attempt_ordinal, plan.route_attempt_ordinal)
            start_ms = (att.started_at or s.clock()) // _NS_PER_MS
            if race is not None and hedge == 0:
                race.first_start_ms = start_ms
            att.set_backoff(
                delay_ms=plan.delay_ms,
                retry_after_ms=plan.retry_after_ms,
                not_before=None if plan.not_before_ms is None else plan.not_before_ms * _NS_PER_MS,
            )
            att.set_cost(reserved=plan.reserve_micros, currency=s.currency, estimated=True)
            self._append(
                EventKind.ATTEMPT_DISPATCHED,
                {
                    "attempt_ordinal": plan.attempt_ordinal,
                    "route_id": route.route_id,
                    "route_release": route.route_release_sha256,
                    "logical_request_digest": adm.logical_request_sha256,
                    "dispatched_at_ms": start_ms,
                },
            )
            stream = None
            if self.log is not None and self.r.sink is not None:
                stream = AttemptStream(self.log, att, self.r.sink, held=race is not None)
            dispatch = Dispatch(
                route,
                plan.attempt_ordinal,
                plan.route_attempt_ordinal,
                self.r.idempotency_key,
                adm.deadline_ms - start_ms,
                att,
                hedge,
                stream,
            )
            try:
                raw = yield Call(self.r.call, dispatch)
                result = yield from self._settle(att, dispatch, raw)
            except asyncio.CancelledError as exc:
                cancel = exc
                record_exception(att.span, exc)
                result = CallResult(
                    kind=OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE, error=error_type(exc)
                )
            except AttemptFailed as exc:
                record_exception(att.span, exc)
                result = exc.result
            except Exception as exc:  # any escape is an observation, classified conservatively
                record_exception(att.span, exc)
                # what the call already observed on the attempt (e.g. the streaming wrapper's
                # stream_interrupted_after_output) outranks a guess from the exception's type
                kind = att.kind if att.kind is not None else classify_exception(exc)
                result = CallResult(kind=kind, error=error_type(exc))
            end_ns = s.clock()
            ends.pin(end_ns)
            end_ms = end_ns // _NS_PER_MS
            cancelled = cancel is not None
            hedge_result = None
            if race is not None:
                hedge_result = race.finished(
                    plan.attempt_ordinal,
                    success=result.kind is None and not cancelled,
                    cancelled=cancelled,
                )
                if race.winner == plan.attempt_ordinal:
                    race.value = result.value
            _record_outcome(att, result, cancelled, hedge_result, s.currency, plan.reserve_micros)
            observed = ObservedAttempt(
                route_id=route.route_id,
                route_release=route.route_release_sha256,
                route_attempt_ordinal=plan.route_attempt_ordinal,
                attempt_ordinal=plan.attempt_ordinal,
                logical_request_digest=adm.logical_request_sha256,
                idempotency_digest=adm.idempotency_key_sha256,
                start_ms=start_ms,
                end_ms=end_ms,
                outcome=Outcome.SUCCESS if result.kind is None else result.kind.family,
                outcome_kind=result.kind,
                not_before_ms=plan.not_before_ms,
                backoff_delay_ms=plan.delay_ms,
                retry_after_ms=(
                    None
                    if result.retry_after_ms is None
                    else bounded_hint_ms(result.retry_after_ms, s.policy.max_retry_after_ms)
                ),
                cost_reserved_micros=plan.reserve_micros,
                cost_actual_micros=result.cost_actual_micros,
                hedge_ordinal=hedge,
                hedge_result=hedge_result,
                cancelled=cancelled,
            )
            self._append(
                EventKind.ATTEMPT_OBSERVED,
                {"attempt": to_obj(observed), "reconciled": None},
            )
            failed = None if cancelled else _ROUTE_FAILED[observed.outcome]
            self._release(plan.attempt_ordinal, hedge, failed=failed)
            if race is None:
                receipt = self._evaluate((observed,))
                decision = receipt.decisions[-1].decision
                att.set_decision(decision)
                self._commit_decisions(receipt)
                self.attempts.append(observed)
                if observed.outcome is Outcome.SUCCESS:
                    self.value = result.value
                if stream is not None:
                    _close_stream(stream, receipt.terminal is Terminal.COMPLETE)
            else:
                race.observed[plan.attempt_ordinal] = observed
                if stream is not None:
                    _close_stream(stream, race.winner == plan.attempt_ordinal)
        if cancel is not None:
            raise cancel
        return observed

    def _settle(self, att: Attempt, dispatch: Dispatch, raw: Any) -> Program[CallResult]:
        """The call's return value as an observation; a submitted job is polled to its end."""
        if isinstance(raw, CallResult):
            return raw
        if isinstance(raw, Submitted):
            return (yield from self._job(att, dispatch, raw))
        return CallResult(value=raw)

    def _job(self, att: Attempt, dispatch: Dispatch, submitted: Submitted) -> Program[CallResult]:
        """Poll a provider job by id within the polling bounds; never resubmit it."""
        s = self.s
        if s.poll is None:
            raise TypeError("the call submitted a job: give the controller poll=")
        self._append(
            EventKind.JOB_SUBMITTED,
            {"attempt_ordinal": dispatch.attempt_ordinal, "job_id": submitted.job_id},
        )
        att.set_attributes({v.JOB_ID_KEY: submitted.job_id})
        job = Job(
            submitted.job_id,
            dispatch.route.route_id,
            dispatch.attempt_ordinal,
            dispatch.idempotency_key,
        )
        polls, hint = 0, submitted.retry_after_ms
        last = self._now_ms()
        while True:
            at = next_poll_ms(
                s.policy.polling,
                polls_done=polls,
                last_poll_ms=last,
                deadline_ms=self.r.admission.deadline_ms,
                retry_after_ms=hint,
                max_retry_after_ms=s.policy.max_retry_after_ms,
            )
            if at is None:  # still running when the polling bounds ran out
                return CallResult(kind=OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE, error="job_pending")
            if (wait := at - self._now_ms()) > 0:
                yield Sleep(wait / 1000)
            answer = yield from self._poll(job, att)
            polls, last = polls + 1, self._now_ms()
            att.set_attributes({v.JOB_POLLS_KEY: polls})
            if not isinstance(answer, Pending):
                return answer
            hint = answer.retry_after_ms

    def _poll(self, job: Job, att: Attempt | None) -> Program[CallResult | Pending]:
        """One poll of a provider job: its result, or :class:`Pending` (also when the poll
        itself failed: that says nothing about the job)."""
        assert self.s.poll is not None
        try:
            answer = yield Call(self.s.poll, job)
        except AttemptFailed as exc:
            return exc.result
        except Exception as exc:
            if att is not None:
                record_exception(att.span, exc)
            return Pending()
        return answer if isinstance(answer, (CallResult, Pending)) else CallResult(value=answer)

    # -- hedging ----------------------------------------------------------------------------
    def _race(self, plan: PlannedAttempt) -> Program[None]:
        """Attempt 1 and its hedges, concurrently; the first success wins and commits."""
        s, race = self.s, _Race()
        handles: list[Any] = [(yield Spawn(self._attempt(plan, 0, race)))]
        done: set[Any] = set()
        reserved, hedges, hedging = plan.reserve_micros, 0, True
        try:
            while race.winner is None and len(done) < len(handles):
                hedge = None
                if hedging and race.first_start_ms is not None:
                    hedge = hedge_step(
                        s.policy,
                        self.r.admission,
                        first_start_ms=race.first_start_ms,
                        group_reserved_micros=reserved,
                        hedges_so_far=hedges,
                    )
                due = None if hedge is None else hedge.not_before_ms
                if race.first_start_ms is None:
                    timeout: float | None = 0.0  # let the first attempt start
                elif due is None:
                    timeout = None
                else:
                    timeout = max(0, due - self._now_ms()) / 1000
                running = tuple(h for h in handles if h not in done)
                done |= set((yield WaitFirst(running, timeout)))
                if hedge is None or race.winner is not None or len(done) == len(handles):
                    continue
                if due is None or self._now_ms() < due:
                    continue
                verdict: bool | None = True
                while verdict:
                    verdict = self._consult(hedge, self._now_ms(), hedge.hedge_ordinal)
                if verdict is None:
                    hedging = False
                    continue
                race.members += 1
                handles.append((yield Spawn(self._attempt(hedge, hedge.hedge_ordinal, race))))
                hedges += 1
                reserved += hedge.reserve_micros
            losers = tuple(h for h in handles if h not in done)
            if losers:
                yield Cancel(losers)
        except asyncio.CancelledError:
            yield Cancel(tuple(handles))
            raise
        finally:
            self.attempts.extend(race.observed[n] for n in sorted(race.observed))
            if race.winner is not None:
                self.value = race.value

    # -- recovery -----------------------------------------------------------------------
    def _reconcile(
        self, pending: PendingDispatch
    ) -> Program[tuple[ObservedAttempt, ReceiverStatus]]:
        """Ask the receiver about a dispatch left without outcome, as an attempt span of
        its own: by job id (a provider job) or by idempotency key; an answer
        ``in_progress`` is polled again within the polling bounds, then left
        indeterminate. The value of a confirmed success is the request's value."""
        s, req = self.s, self.req
        assert req is not None
        route = s.policy.route(pending.route_id)
        method = (
            ReconciliationMethod.REQUEST_ID
            if pending.job_id
            else ReconciliationMethod.IDEMPOTENCY_KEY
        )
        with (
            _EndsAt() as ends,
            req.attempt(
                route.route_id,
                route_release=route.route_release_sha256,
                route_priority=route.priority,
                name=f"reconcile {route.route_id}",
                attributes=self._route_attributes(route)
                | {v.RECONCILIATION_METHOD_KEY: method.value},
                hedge_ordinal=pending.reserved.get("hedge_ordinal"),
            ) as att,
        ):
            _check_ordinals(att, pending.attempt_ordinal, pending.reserved["route_attempt_ordinal"])
            polls = 0
            while True:
                answer = yield from self._ask(pending)
                polls += 1
                att.span.add_event(
                    v.RECONCILIATION_POLL_EVENT,
                    {v.RECONCILIATION_STATUS_KEY: answer.status.value},
                    timestamp=s.clock(),
                )
                if answer.status is not ReceiverStatus.IN_PROGRESS:
                    break
                at = next_poll_ms(
                    s.policy.polling,
                    polls_done=polls,
                    last_poll_ms=self._now_ms(),
                    deadline_ms=self.r.admission.deadline_ms,
                    retry_after_ms=answer.retry_after_ms,
                    max_retry_after_ms=s.policy.max_retry_after_ms,
                )
                if at is None:  # the polling bounds ran out: the uncertainty stays
                    answer = Reconciliation(ReceiverStatus.INDETERMINATE)
                    break
                yield Sleep(max(0, at - self._now_ms()) / 1000)
            att.set_attributes({v.RECONCILIATION_POLLS_KEY: polls})
            now_ns = s.clock()
            observed = reconciled_attempt(pending, answer, now_ns // _NS_PER_MS)
            ends.pin(now_ns)  # the span ends when the receiver answered
            if observed.outcome is Outcome.SUCCESS:
                att.set_outcome(Outcome.SUCCESS)
                self.value = answer.value
            else:
                assert observed.outcome_kind is not None
                att.set_outcome(observed.outcome_kind, error=f"reconciled_{answer.status.value}")
            att.set_cost(
                reserved=observed.cost_reserved_micros,
                actual=observed.cost_actual_micros,
                currency=s.currency,
            )
            req.record_reconciliation(_RESULT_OF[answer.status], method=method, attempt=att)
        return observed, answer.status

    def _ask(self, pending: PendingDispatch) -> Program[Reconciliation]:
        """One poll of the receiver about ``pending``."""
        s = self.s
        if pending.job_id is None:
            assert s.reconcile is not None
            answer = yield Call(s.reconcile, pending)
            if not isinstance(answer, Reconciliation):
                raise TypeError(f"reconcile returned {type(answer).__name__}, not Reconciliation")
            return answer
        job = Job(pending.job_id, pending.route_id, pending.attempt_ordinal, self.r.idempotency_key)
        result = yield from self._poll(job, None)
        if isinstance(result, Pending):
            return Reconciliation(ReceiverStatus.IN_PROGRESS, retry_after_ms=result.retry_after_ms)
        if result.kind is None:
            return Reconciliation(
                ReceiverStatus.SUCCEEDED,
                cost_actual_micros=result.cost_actual_micros,
                value=result.value,
            )
        status = (
            ReceiverStatus.INDETERMINATE
            if result.kind.family is Outcome.INDETERMINATE
            else ReceiverStatus.FAILED_NO_EFFECT
        )
        return Reconciliation(
            status,
            cost_actual_micros=result.cost_actual_micros,
            kind=result.kind,
            retry_after_ms=result.retry_after_ms,
        )


def _close_stream(stream: AttemptStream, won: bool) -> None:
    """Commit the stream of the attempt that ended the request, invalidate any other."""
    if won:
        stream.commit()
    else:
        stream.invalidate()


def _check_ordinals(att: Attempt, ordinal: int, route_ordinal: int) -> None:
    if (att.ordinal, att.route_ordinal) != (ordinal, route_ordinal):
        raise RuntimeError(
            f"span ordinals {att.ordinal}/{att.route_ordinal} differ from the plan "
            f"{ordinal}/{route_ordinal}"
        )


def _record_outcome(
    att: Attempt,
    result: CallResult,
    cancelled: bool,
    hedge_result: HedgeResult | None,
    currency: str,
    reserved: int,
) -> None:
    """What the attempt observed, on its span."""
    if result.kind is None:
        att.set_outcome(Outcome.SUCCESS, http_status=result.http_status)
    else:
        att.set_outcome(result.kind, error=result.error, http_status=result.http_status)
    if cancelled:
        att.set_attributes({v.CANCELLED_KEY: True})
    if hedge_result is HedgeResult.WINNER:
        att.commit_hedge()
    elif hedge_result is HedgeResult.CANCELLED:
        att.cancel_hedge()
    elif hedge_result is HedgeResult.LATE:
        att.set_attributes({v.HEDGE_RESULT_KEY: HedgeResult.LATE.value})
    att.set_cost(reserved=reserved, actual=result.cost_actual_micros, currency=currency)
