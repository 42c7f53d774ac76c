"""The control-plane lab: the reference sequence, one mutation case per rule, a byte-stable report.

Reference sequence (times in ms on the lab's own epoch): ``private-primary`` attempt 1 is
rate limited at 1,100 ms with Retry-After 250 ms, so attempt 2 may not start before
1,350 ms; attempt 2 is unavailable at 1,450 ms, the primary's two attempts are exhausted,
so ``external-fallback`` attempt 1 may not start before 1,650 ms and succeeds. The external
route is allowed only because the policy's maximum boundary is ``external_provider`` and
both routes satisfy the request's capability contract field by field, bind the same
behavior class with evidence valid past the deadline, keep the data fresh enough and
process it in an allowed region.

Each case changes one input — the policy, the admission, the attempts, the shared guards'
verdicts, or drives one of the pure machines (breaker, budget, stream commit log, poll
schedule) — and must be caught by its specific typed error (and field), terminal or
outcome. Everything is a pure function of constants, written as canonical JSON, so the
report is byte-identical across runs, processes and machines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from retryscope.canonical import canonical_json, sha256_hex
from retryscope.control._capability import (
    CapabilityContract,
    Modality,
    OutputMode,
)
from retryscope.control._commit import CommitLog, StreamProtocolError, StreamReader
from retryscope.control._evaluator import (
    AttemptRejected,
    ObservedAttempt,
    Receipt,
    evaluate,
)
from retryscope.control._guards import (
    BudgetLimits,
    BudgetState,
    CircuitState,
    Gate,
    GuardKind,
    breaker_admit,
    breaker_record,
    budget_admit,
    budget_request,
)
from retryscope.control._policy import (
    Admission,
    BehaviorEvidence,
    CircuitBreakerPolicy,
    FallbackRoute,
    HedgePolicy,
    PolicyError,
    PollPolicy,
    RetryPolicy,
)
from retryscope.control._receipts import (
    attempts_sha256,
    policy_sha256,
    receipt_json,
    receipt_sha256,
    receipt_to_obj,
    replay,
)
from retryscope.control._schedule import (
    exponential_delay_ms,
    next_poll_ms,
    retry_delay_ms,
)
from retryscope.instrumentation import idempotency_sha256, request_sha256
from retryscope.vocabulary import (
    DataBoundary,
    HedgeResult,
    Outcome,
    OutcomeKind,
    RetryOwner,
    Terminal,
)

LAB_ID: Final = "retryscope/control-plane-lab/v2"


def _label(text: str) -> str:
    return sha256_hex(text.encode("utf-8"))


SCHEMA: Final = _label("schema:incident-severity/v1")
REQUIRED: Final = CapabilityContract(
    input_modalities=frozenset({Modality.TEXT}),
    output_modalities=frozenset({Modality.TEXT}),
    context_tokens=8_000,
    output_tokens=1_000,
    output_mode=OutputMode.JSON_SCHEMA,
    output_schema_sha256=SCHEMA,
    tools=frozenset(),
    stream_terminal_event=False,
    stream_usage_event=False,
    regions=frozenset({"eu-central-1", "eu-west-1"}),
    retention_days=30,
)
"""What the lab's request needs: text in, schema-constrained JSON out, EU processing."""
MULTIMODAL: Final = frozenset({Modality.TEXT, Modality.IMAGE})
BEHAVIOR: Final = _label("behavior:incident-severity-contract/v1")
TENANT: Final = "tenant-lab"
OPERATION: Final = "classify_incident"
IDEMPOTENCY_KEY: Final = "INC-4711/1"
REQUEST_PAYLOAD: Final = {"operation": OPERATION, "ticket": "INC-4711"}
REQUEST: Final = request_sha256(REQUEST_PAYLOAD)
IDEMPOTENCY: Final = idempotency_sha256(TENANT, OPERATION, IDEMPOTENCY_KEY)
REQUEST_ARGUMENTS: Final[dict[str, Any]] = {
    "request": REQUEST_PAYLOAD,
    "idempotency_key": IDEMPOTENCY_KEY,
    "operation": OPERATION,
    "tenant": TENANT,
}
"""The lab's request as a controller's ``run`` takes it (the deadline apart)."""
DEADLINE_MS: Final = 5_000
EVIDENCE_EXPIRES_MS: Final = 4_102_444_800_000
"""2100-01-01T00:00:00Z: the routes' behavior evidence outlives any deadline here."""

PRIMARY: Final = FallbackRoute(
    route_id="private-primary",
    route_release_sha256=_label("release:private-primary/model-a/2026-10-01"),
    capability=replace(
        REQUIRED,
        input_modalities=MULTIMODAL,
        context_tokens=128_000,
        output_tokens=4_096,
        regions=frozenset({"eu-west-1"}),
        retention_days=0,
    ),
    behavior_class_sha256=BEHAVIOR,
    behavior_evidence=BehaviorEvidence(
        _label("evaluation:model-a/2026-10-01"), EVIDENCE_EXPIRES_MS
    ),
    data_boundary=DataBoundary.PRIVATE_SERVICE,
    priority=0,
    max_attempts=2,
    supports_idempotency=True,
    max_attempt_cost_micros=200_000,
)
FALLBACK: Final = FallbackRoute(
    route_id="external-fallback",
    route_release_sha256=_label("release:external-fallback/model-b/2026-09-15"),
    capability=replace(
        REQUIRED,
        input_modalities=MULTIMODAL,
        context_tokens=32_000,
        output_tokens=2_048,
        regions=frozenset({"eu-central-1"}),
        retention_days=30,
    ),
    behavior_class_sha256=BEHAVIOR,
    behavior_evidence=BehaviorEvidence(
        _label("evaluation:model-b/2026-09-15"), EVIDENCE_EXPIRES_MS
    ),
    data_boundary=DataBoundary.EXTERNAL_PROVIDER,
    priority=1,
    max_attempts=1,
    supports_idempotency=True,
    max_attempt_cost_micros=300_000,
)
TEXT_ONLY: Final = FallbackRoute(
    route_id="text-json-fallback",
    route_release_sha256=_label("release:text-json-fallback/model-c/2026-08-30"),
    capability=replace(FALLBACK.capability, input_modalities=frozenset({Modality.TEXT})),
    behavior_class_sha256=BEHAVIOR,
    behavior_evidence=BehaviorEvidence(
        _label("evaluation:model-c/2026-08-30"), EVIDENCE_EXPIRES_MS
    ),
    data_boundary=DataBoundary.EXTERNAL_PROVIDER,
    priority=2,
    max_attempts=1,
    supports_idempotency=True,
    max_attempt_cost_micros=100_000,
)
"""Exercise 4's third route: text in, strict JSON out, no image input."""


def reference_policy() -> RetryPolicy:
    """The lab's policy: harness-owned, external fallback explicitly permitted; reusable."""
    return RetryPolicy(
        retry_owner=RetryOwner.HARNESS,
        capability=REQUIRED,
        behavior_class_sha256=BEHAVIOR,
        max_data_boundary=DataBoundary.EXTERNAL_PROVIDER,
        base_backoff_ms=200,
        max_backoff_ms=1_500,
        max_retry_after_ms=2_000,
        max_total_attempts=4,
        max_total_cost_micros=1_000_000,
        routes=(PRIMARY, FALLBACK),
        freshness_bound_ms=60_000,
        polling=PollPolicy(interval_ms=1_000, max_polls=5),
    )


def reference_admission(deadline_ms: int = DEADLINE_MS) -> Admission:
    """The lab's request bound to the policy."""
    return Admission(REQUEST, IDEMPOTENCY, deadline_ms)


def _observed(route: FallbackRoute, ordinal: int, route_ordinal: int, **kw: Any) -> ObservedAttempt:
    return ObservedAttempt(
        route_id=route.route_id,
        route_release=route.route_release_sha256,
        route_attempt_ordinal=route_ordinal,
        attempt_ordinal=ordinal,
        logical_request_digest=REQUEST,
        idempotency_digest=IDEMPOTENCY,
        cost_reserved_micros=route.max_attempt_cost_micros,
        **kw,
    )


def reference_attempts() -> tuple[ObservedAttempt, ...]:
    """Rate limited → unavailable (primary exhausted) → success on the fallback."""
    return (
        _observed(
            PRIMARY, 1, 1, start_ms=1_000, end_ms=1_100, outcome=Outcome.RETRYABLE,
            outcome_kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250,
            cost_actual_micros=150_000,
        ),
        _observed(
            PRIMARY, 2, 2, start_ms=1_350, end_ms=1_450, outcome=Outcome.RETRYABLE,
            outcome_kind=OutcomeKind.UNAVAILABLE, not_before_ms=1_350, backoff_delay_ms=250,
        ),
        _observed(
            FALLBACK, 3, 1, start_ms=1_650, end_ms=1_900, outcome=Outcome.SUCCESS,
            not_before_ms=1_650, backoff_delay_ms=200, cost_actual_micros=250_000,
        ),
    )  # fmt: skip


# --- the cases ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Inputs:
    """What one evaluation gets; a case changes some of it."""

    policy: RetryPolicy
    admission: Admission
    attempts: tuple[ObservedAttempt, ...]
    gates: tuple[Gate, ...] = ()
    cancelled_at_ms: int | None = None


def reference_inputs() -> Inputs:
    return Inputs(reference_policy(), reference_admission(), reference_attempts())


@dataclass(frozen=True, slots=True)
class Case:
    """One rule: what the case does and what must catch it."""

    name: str
    expected: str
    observe: Callable[[], str]


def _verdict(inputs: Inputs) -> str:
    """The evaluator's answer: its typed error and field, or the terminal and the route."""
    try:
        receipt = evaluate(
            inputs.policy,
            inputs.admission,
            inputs.attempts,
            gates=inputs.gates,
            cancelled_at_ms=inputs.cancelled_at_ms,
        )
    except (PolicyError, AttemptRejected) as exc:
        return f"{type(exc).__name__} at {exc.field}"
    return _terminal(receipt)


def _terminal(receipt: Receipt) -> str:
    terminal = receipt.terminal.value if receipt.terminal else "none"
    if not receipt.decisions:
        return f"terminal {terminal}"
    winner = next(
        (d for d in receipt.decisions if d.hedge_result is HedgeResult.WINNER),
        receipt.decisions[-1],
    )
    return f"terminal {terminal} on {winner.route_id}"


def _mutation(change: Callable[[Inputs], Inputs]) -> Callable[[], str]:
    return lambda: _verdict(change(reference_inputs()))


def _route(index: int, **changes: Any) -> Callable[[Inputs], Inputs]:
    """Change the policy's route at ``index``, keeping the others."""

    def apply(i: Inputs) -> Inputs:
        routes = list(i.policy.routes)
        routes[index] = replace(routes[index], **changes)
        return replace(i, policy=replace(i.policy, routes=tuple(routes)))

    return apply


def _policy(**changes: Any) -> Callable[[Inputs], Inputs]:
    return lambda i: replace(i, policy=replace(i.policy, **changes))


def _attempt(index: int, **changes: Any) -> Callable[[Inputs], Inputs]:
    """Change the reference attempt at ``index``, keeping the others."""

    def apply(i: Inputs) -> Inputs:
        attempts = list(i.attempts)
        attempts[index] = replace(attempts[index], **changes)
        return replace(i, attempts=tuple(attempts))

    return apply


def _fallback_capability(**changes: Any) -> Callable[[Inputs], Inputs]:
    return _route(1, capability=replace(FALLBACK.capability, **changes))


def _fail_first(kind: OutcomeKind) -> Callable[[Inputs], Inputs]:
    def apply(i: Inputs) -> Inputs:
        first = replace(i.attempts[0], outcome=kind.family, outcome_kind=kind, retry_after_ms=None)
        return replace(i, attempts=(first,))

    return apply


# shared-state cases use the real machines, then hand their verdicts to the evaluator
BREAKER: Final = CircuitBreakerPolicy(
    failure_percent=50,
    minimum_throughput=4,
    sampling_duration_ms=10_000,
    break_duration_ms=5_000,
    half_open_probes=1,
)


def _tripped(route_id: str, now_ms: int) -> tuple[CircuitState, Gate]:
    """A breaker opened by four failures in its window, asked for attempt 1 at ``now_ms``."""
    state = CircuitState()
    for t in range(4):
        state, ticket, _ = breaker_admit(BREAKER, state, route_id, 100 * t)
        assert ticket is not None
        state = breaker_record(BREAKER, state, ticket, True, 100 * t + 50)
    state, ticket, snap = breaker_admit(BREAKER, state, route_id, now_ms)
    return state, Gate(1, route_id, ticket is not None, snap)


def _primary_breaker_open() -> str:
    _, gate = _tripped(PRIMARY.route_id, 1_000)
    skipped = replace(
        reference_attempts()[2],
        attempt_ordinal=1,
        start_ms=1_000,
        end_ms=1_250,
        not_before_ms=None,
        backoff_delay_ms=None,
    )
    policy = replace(reference_policy(), circuit_breaker=BREAKER)
    return _verdict(Inputs(policy, reference_admission(), (skipped,), (gate,)))


def _every_breaker_open() -> str:
    gates = tuple(_tripped(r.route_id, 1_000)[1] for r in (PRIMARY, FALLBACK))
    policy = replace(reference_policy(), circuit_breaker=BREAKER)
    return _verdict(Inputs(policy, reference_admission(), (), gates))


def _half_open_probe_bound() -> str:
    state, _ = _tripped(PRIMARY.route_id, 1_000)
    seen = []
    for at in (5_349, 5_350, 5_351):  # opened at 350 ms: half-open from 5,350 ms
        state, ticket, snap = breaker_admit(BREAKER, state, PRIMARY.route_id, at)
        seen.append(f"{at}: {snap.state} {'admitted' if ticket else 'rejected'}")
    return "; ".join(seen)


def _retry_budget_exhausted() -> str:
    limits = BudgetLimits(percent=20, minimum=1)
    budget = BudgetState()
    for _ in range(10):
        budget = budget_request(limits, budget, 1)
    for _ in range(2):  # 20 % of 10 requests in flight: two retries already run
        budget, admitted, _ = budget_admit(limits, budget, GuardKind.RETRY_BUDGET, 1_300)
        assert admitted
    budget, admitted, snap = budget_admit(limits, budget, GuardKind.RETRY_BUDGET, 1_350)
    gate = Gate(2, PRIMARY.route_id, admitted, snap)
    i = reference_inputs()
    return _verdict(replace(i, attempts=i.attempts[:1], gates=(gate,)))


HEDGING: Final = HedgePolicy(
    route_id=FALLBACK.route_id,
    delay_ms=300,
    max_hedges=1,
    budget_percent=10,
    min_hedge_concurrency=1,
)


def _race(hedge_start: int, primary: dict[str, Any]) -> Inputs:
    """The primary races a hedge on the fallback route, started at ``hedge_start``."""
    first = _observed(PRIMARY, 1, 1, start_ms=1_000, hedge_ordinal=0, **primary)
    hedge = _observed(
        FALLBACK,
        2,
        1,
        start_ms=hedge_start,
        end_ms=hedge_start + 200,
        outcome=Outcome.SUCCESS,
        hedge_ordinal=1,
        hedge_result=HedgeResult.WINNER,
        not_before_ms=1_300,
    )
    return Inputs(
        replace(reference_policy(), hedging=HEDGING), reference_admission(), (first, hedge)
    )


_CANCELLED_LOSER: Final = {
    "end_ms": 1_500,
    "outcome": Outcome.INDETERMINATE,
    "outcome_kind": OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE,
    "hedge_result": HedgeResult.CANCELLED,
    "cancelled": True,
}


def _stream_splice() -> str:
    log = CommitLog("lab")
    for chunk in ("The incident is ", "severity 2 because"):
        log.emit(1, chunk)
    try:
        log.emit(3, "Severity: 2.")  # the fallback continuing the broken prefix
    except StreamProtocolError as exc:
        return f"StreamProtocolError: {exc}"
    return "spliced"


def _stream_restart() -> str:
    log = CommitLog("lab")
    for chunk in ("The incident is ", "severity 2 because"):
        log.emit(1, chunk)
    log.invalidate(1)
    log.emit(3, '{"severity": 2}')
    log.commit(3)
    reader = StreamReader()
    first = log.events[0]
    reader.apply(first)
    for event in log.resume(first.event_id):  # the client reconnects after one event
        reader.apply(event)
    return f"committed {list(reader.committed or ())} after invalidating {reader.invalidated}"


def _poll_bounds() -> str:
    polling = reference_policy().polling
    at, polls, times = 1_900, 0, []
    while (
        nxt := next_poll_ms(
            polling,
            polls_done=polls,
            last_poll_ms=at,
            deadline_ms=DEADLINE_MS,
            retry_after_ms=None,
            max_retry_after_ms=2_000,
        )
    ) is not None:
        at, polls = nxt, polls + 1
        times.append(nxt)
    return f"polls at {times}, none at or after {DEADLINE_MS}"


def _one_policy_many_requests() -> str:
    policy, seen = reference_policy(), []
    for ticket in ("INC-4711", "INC-4712"):
        payload = {"operation": OPERATION, "ticket": ticket}
        key = f"{ticket}/1"
        admission = Admission(
            request_sha256(payload), idempotency_sha256(TENANT, OPERATION, key), DEADLINE_MS
        )
        attempts = tuple(
            replace(
                a,
                logical_request_digest=admission.logical_request_sha256,
                idempotency_digest=admission.idempotency_key_sha256,
            )
            for a in reference_attempts()
        )
        seen.append(_terminal(evaluate(policy, admission, attempts)))
    return f"{' / '.join(seen)} under {policy_sha256(policy)[:12]}"


def _cases() -> tuple[Case, ...]:
    ref = reference_inputs()
    first_ok = replace(
        ref.attempts[0], outcome=Outcome.SUCCESS, outcome_kind=None, retry_after_ms=None
    )
    return (
        Case(
            "valid success",
            "terminal complete on private-primary",
            _mutation(lambda i: replace(i, attempts=(first_ok,))),
        ),
        Case(
            "opaque retry ownership",
            "OwnerNotAccepted at retry_owner",
            _mutation(_policy(retry_owner=RetryOwner.ADAPTER)),
        ),
        Case(
            "contract drift",
            "CapabilityMismatch at routes[1].capability.context_tokens",
            _mutation(_fallback_capability(context_tokens=4_000)),
        ),
        Case(
            "boundary drift",
            "BoundaryExceeded at routes[1].data_boundary",
            _mutation(_policy(max_data_boundary=DataBoundary.PRIVATE_SERVICE)),
        ),
        Case(
            "logical request drift",
            "RequestDrift at attempts[1].logical_request_digest",
            _mutation(_attempt(1, logical_request_digest=_label("other"))),
        ),
        Case(
            "premature fallback",
            "RouteMismatch at attempts[1].route_id",
            _mutation(
                lambda i: replace(
                    i,
                    attempts=(
                        i.attempts[0],
                        replace(
                            i.attempts[2], attempt_ordinal=2, start_ms=1_350, not_before_ms=1_350
                        ),
                    ),
                )
            ),
        ),
        Case(
            "non-retryable failure",
            "terminal stop_non_retryable on private-primary",
            _mutation(_fail_first(OutcomeKind.REJECTED)),
        ),
        Case(
            "indeterminate outcome",
            "terminal stop_indeterminate on private-primary",
            _mutation(_fail_first(OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE)),
        ),
        Case(
            "total attempt budget",
            "terminal stop_attempt_budget on private-primary",
            _mutation(
                lambda i: replace(
                    i, policy=replace(i.policy, max_total_attempts=2), attempts=i.attempts[:2]
                )
            ),
        ),
        Case(
            "cost budget",
            "terminal stop_cost_budget on private-primary",
            _mutation(
                lambda i: replace(
                    i,
                    policy=replace(i.policy, max_total_cost_micros=600_000),
                    attempts=i.attempts[:2],
                )
            ),
        ),
        Case(
            "not_before at the deadline",
            "terminal stop_deadline on private-primary",
            _mutation(
                lambda i: replace(i, admission=reference_admission(1_650), attempts=i.attempts[:2])
            ),
        ),
        Case(
            "success at the deadline",
            "terminal stop_deadline on external-fallback",
            _mutation(lambda i: replace(i, admission=reference_admission(1_900))),
        ),
        Case(
            "route exhaustion",
            "terminal stop_route_exhausted on external-fallback",
            _mutation(_attempt(2, outcome=Outcome.RETRYABLE, outcome_kind=OutcomeKind.UNAVAILABLE)),
        ),
        Case(
            "text-only route for an image-grounded request",
            "CapabilityMismatch at routes[2].capability.input_modalities",
            _mutation(
                _policy(
                    capability=replace(REQUIRED, input_modalities=MULTIMODAL),
                    routes=(PRIMARY, FALLBACK, TEXT_ONLY),
                )
            ),
        ),
        Case(
            "residency",
            "ResidencyViolation at routes[1].capability.regions",
            _mutation(_fallback_capability(regions=frozenset({"us-east-1"}))),
        ),
        Case(
            "retention",
            "ResidencyViolation at routes[1].capability.retention_days",
            _mutation(_fallback_capability(retention_days=90)),
        ),
        Case(
            "output contract",
            "OutputContractMismatch at routes[1].capability.output_schema_sha256",
            _mutation(_fallback_capability(output_schema_sha256=_label("schema:other/v1"))),
        ),
        Case(
            "stale fallback",
            "FreshnessExceeded at routes[1].staleness_ms",
            _mutation(_route(1, staleness_ms=86_400_000)),
        ),
        Case(
            "expired behavior evidence",
            "EvidenceExpired at routes[1].behavior_evidence.expires_at_ms",
            _mutation(
                _route(
                    1,
                    behavior_evidence=replace(FALLBACK.behavior_evidence, expires_at_ms=4_999),
                )
            ),
        ),
        Case(
            "retry budget exhausted",
            "terminal stop_retry_budget on private-primary",
            _retry_budget_exhausted,
        ),
        Case(
            "primary breaker open", "terminal complete on external-fallback", _primary_breaker_open
        ),
        Case("every breaker open", "terminal stop_circuit_open", _every_breaker_open),
        Case(
            "half-open probe bound",
            "5349: open rejected; 5350: half_open admitted; 5351: half_open rejected",
            _half_open_probe_bound,
        ),
        Case(
            "hedge wins the race",
            "terminal complete on external-fallback",
            lambda: _verdict(_race(1_300, _CANCELLED_LOSER)),
        ),
        Case(
            "hedge before the latency threshold",
            "EarlyStart at attempts[1].start_ms",
            lambda: _verdict(_race(1_299, _CANCELLED_LOSER)),
        ),
        Case(
            "late result passed off as a failure",
            "InvalidObservation at attempts[0].hedge_result",
            lambda: _verdict(_race(1_300, {"end_ms": 1_600, "outcome": Outcome.SUCCESS})),
        ),
        Case(
            "caller cancelled",
            "terminal stop_cancelled on private-primary",
            _mutation(
                lambda i: replace(
                    i,
                    attempts=(
                        replace(
                            i.attempts[0],
                            outcome=Outcome.INDETERMINATE,
                            retry_after_ms=None,
                            outcome_kind=OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE,
                            cancelled=True,
                        ),
                    ),
                )
            ),
        ),
        Case(
            "fallback spliced onto a broken stream",
            "StreamProtocolError: emit: attempt 1 is still tentative; invalidate it before "
            "attempt 3 streams",
            _stream_splice,
        ),
        Case(
            "broken stream invalidated, fallback committed",
            "committed ['{\"severity\": 2}'] after invalidating [1]",
            _stream_restart,
        ),
        Case(
            "in-progress polls within their bounds",
            "polls at [2900, 3900, 4900], none at or after 5000",
            _poll_bounds,
        ),
        Case(
            "one policy, many requests",
            "terminal complete on external-fallback / terminal complete on external-fallback "
            f"under {policy_sha256(reference_policy())[:12]}",
            _one_policy_many_requests,
        ),
    )


def build_report() -> dict[str, Any]:
    """The lab report as a JSON object (integers and strings only)."""
    inputs = reference_inputs()
    policy = inputs.policy
    receipt = evaluate(policy, inputs.admission, inputs.attempts)
    final = receipt.decisions[-1]
    on_fallback = policy.route(final.route_id).priority > 0
    if receipt.terminal is Terminal.COMPLETE:
        baseline = "completed on compatible fallback" if on_fallback else "completed on primary"
    else:
        baseline = f"failed: {receipt.terminal}"
    cases = []
    for case in _cases():
        observed = case.observe()
        cases.append(
            {
                "case": case.name,
                "expected": case.expected,
                "observed": observed,
                "caught": observed == case.expected,
            }
        )
    raw = receipt_json(receipt)
    tampered = raw.replace(b'"terminal":"complete"', b'"terminal":"stop_deadline"')
    return {
        "lab": LAB_ID,
        "baseline": baseline,
        "schedule": {
            "delays_ms_route_attempts_1_to_5": [
                exponential_delay_ms(200, 1_500, n) for n in range(1, 6)
            ],
            "attempt_2_with_bounded_1200_ms_hint": retry_delay_ms(policy, 2, 1_200),
            "reference_not_before_ms": [d.next_not_before_ms for d in receipt.decisions[:-1]],
        },
        "cases": cases,
        "cases_caught": sum(1 for c in cases if c["caught"]),
        "cases_total": len(cases),
        "replay": {
            "clean": replay(raw).ok,
            "tampered_terminal_drift": [d.field for d in replay(tampered).drift],
        },
        "policy_sha256": policy_sha256(policy),
        "attempts_sha256": attempts_sha256(inputs.attempts),
        "receipt_sha256": receipt_sha256(receipt),
        "receipt": receipt_to_obj(receipt),
    }


@dataclass(frozen=True, slots=True)
class LabResult:
    report: dict[str, Any]
    report_bytes: bytes
    path: Path | None = field(default=None)

    @property
    def passed(self) -> bool:
        r = self.report
        return bool(r["cases_caught"] == r["cases_total"] and r["baseline"].startswith("completed"))

    def text(self) -> str:
        r = self.report
        lines = [
            ("baseline", r["baseline"]),
            ("mutation cases", f"{r['cases_caught']} / {r['cases_total']}"),
            ("policy SHA-256", r["policy_sha256"]),
            ("attempts SHA-256", r["attempts_sha256"]),
            ("receipt SHA-256", r["receipt_sha256"]),
            ("report bytes", f"{len(self.report_bytes):,}"),
            ("report SHA-256", sha256_hex(self.report_bytes)),
        ]
        missed = [c["case"] for c in r["cases"] if not c["caught"]]
        out = "\n".join(f"{k:<20}{v}" for k, v in lines) + "\n"
        return out + "".join(f"not caught          {name}\n" for name in missed)


def run_lab(out: Path | None) -> LabResult:
    """Build the report; write ``out/<policy-sha256>.json`` when ``out`` is given."""
    report = build_report()
    data = canonical_json(report, integers_only=True)
    path = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{report['policy_sha256']}.json"
        path.write_bytes(data)
    return LabResult(report, data, path)
