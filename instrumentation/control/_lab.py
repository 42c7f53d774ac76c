"""The control-plane lab: the reference sequence, twelve mutation cases, a byte-stable report.

Reference sequence (times in ms on the lab's own epoch): ``private-primary`` attempt 1 is
rate limited at 1,100 ms with Retry-After 250 ms, so attempt 2 may not start before
1,350 ms; attempt 2 is unavailable at 1,450 ms, the primary's two attempts are exhausted,
so ``external-fallback`` attempt 1 may not start before 1,650 ms and succeeds. The external
route is allowed only because the policy's maximum boundary is ``external_provider`` and
both routes bind the same capability and behavior digests.

Each mutation case changes the policy or the attempts and must be caught by its specific
typed error (and field) or terminal. Everything is a pure function of constants, written as
canonical JSON, so the report is byte-identical across runs, processes and machines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from retryscope.instrumentation._digests import (
    canonical_json,
    idempotency_sha256,
    request_sha256,
    sha256_hex,
)
from retryscope.instrumentation.control._evaluator import AttemptRejected, ObservedAttempt, evaluate
from retryscope.instrumentation.control._policy import FallbackRoute, PolicyError, RetryPolicy
from retryscope.instrumentation.control._receipts import (
    attempts_sha256,
    policy_sha256,
    receipt_json,
    receipt_sha256,
    receipt_to_obj,
    replay,
)
from retryscope.instrumentation.control._schedule import exponential_delay_ms, retry_delay_ms
from retryscope.vocabulary import DataBoundary, Outcome, OutcomeKind, RetryOwner, Terminal

LAB_ID: Final = "retryscope/control-plane-lab/v1"


def _label(text: str) -> str:
    return sha256_hex(text.encode("utf-8"))


CAPABILITY: Final = _label("capability:text-in/json-out/strict-schema/v1")
BEHAVIOR: Final = _label("behavior:incident-severity-contract/v1")
TENANT: Final = "tenant-lab"
OPERATION: Final = "classify_incident"
IDEMPOTENCY_KEY: Final = "INC-4711/1"
REQUEST_PAYLOAD: Final = {"operation": OPERATION, "ticket": "INC-4711"}
REQUEST: Final = request_sha256(REQUEST_PAYLOAD)
IDEMPOTENCY: Final = idempotency_sha256(TENANT, OPERATION, IDEMPOTENCY_KEY)
PRIMARY: Final = FallbackRoute(
    route_id="private-primary",
    route_release_sha256=_label("release:private-primary/model-a/2026-10-01"),
    capability_contract_sha256=CAPABILITY,
    behavior_class_sha256=BEHAVIOR,
    data_boundary=DataBoundary.PRIVATE_SERVICE,
    priority=0,
    max_attempts=2,
    supports_idempotency=True,
    max_attempt_cost_micros=200_000,
)
FALLBACK: Final = FallbackRoute(
    route_id="external-fallback",
    route_release_sha256=_label("release:external-fallback/model-b/2026-09-15"),
    capability_contract_sha256=CAPABILITY,
    behavior_class_sha256=BEHAVIOR,
    data_boundary=DataBoundary.EXTERNAL_PROVIDER,
    priority=1,
    max_attempts=1,
    supports_idempotency=True,
    max_attempt_cost_micros=300_000,
)


def reference_policy() -> RetryPolicy:
    """The lab's policy: harness-owned, external fallback explicitly permitted."""
    return RetryPolicy(
        retry_owner=RetryOwner.HARNESS,
        logical_request_sha256=REQUEST,
        idempotency_key_sha256=IDEMPOTENCY,
        capability_contract_sha256=CAPABILITY,
        behavior_class_sha256=BEHAVIOR,
        max_data_boundary=DataBoundary.EXTERNAL_PROVIDER,
        base_backoff_ms=200,
        max_backoff_ms=1_500,
        max_retry_after_ms=2_000,
        max_total_attempts=4,
        max_total_cost_micros=1_000_000,
        deadline_ms=5_000,
        routes=(PRIMARY, FALLBACK),
    )


def _attempt(route: FallbackRoute, ordinal: int, route_ordinal: int, **kw: Any) -> ObservedAttempt:
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
        _attempt(
            PRIMARY, 1, 1, start_ms=1_000, end_ms=1_100, outcome=Outcome.RETRYABLE,
            outcome_kind=OutcomeKind.RATE_LIMITED, retry_after_ms=250,
            cost_actual_micros=150_000,
        ),
        _attempt(
            PRIMARY, 2, 2, start_ms=1_350, end_ms=1_450, outcome=Outcome.RETRYABLE,
            outcome_kind=OutcomeKind.UNAVAILABLE, not_before_ms=1_350, backoff_delay_ms=250,
        ),
        _attempt(
            FALLBACK, 3, 1, start_ms=1_650, end_ms=1_900, outcome=Outcome.SUCCESS,
            not_before_ms=1_650, backoff_delay_ms=200, cost_actual_micros=250_000,
        ),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Case:
    """One mutation: a policy/attempts change and what must catch it."""

    name: str
    expected: str
    mutate: Callable[
        [RetryPolicy, tuple[ObservedAttempt, ...]], tuple[RetryPolicy, tuple[ObservedAttempt, ...]]
    ]


def _fail_first(kind: OutcomeKind) -> Callable[..., Any]:
    def mutate(p: RetryPolicy, a: tuple[ObservedAttempt, ...]) -> Any:
        return p, (replace(a[0], outcome=kind.family, outcome_kind=kind, retry_after_ms=None),)

    return mutate


def _route(index: int, **changes: Any) -> Callable[[RetryPolicy], RetryPolicy]:
    def apply(p: RetryPolicy) -> RetryPolicy:
        routes = list(p.routes)
        routes[index] = replace(routes[index], **changes)
        return replace(p, routes=tuple(routes))

    return apply


CASES: Final[tuple[Case, ...]] = (
    Case(
        "valid success",
        "terminal complete",
        lambda p, a: (p, (replace(a[0], outcome=Outcome.SUCCESS, outcome_kind=None),)),
    ),
    Case(
        "opaque retry ownership",
        "OwnerNotAccepted at retry_owner",
        lambda p, a: (replace(p, retry_owner=RetryOwner.ADAPTER), a),
    ),
    Case(
        "contract drift",
        "CapabilityMismatch at routes[1].capability_contract_sha256",
        lambda p, a: (_route(1, capability_contract_sha256=_label("capability:text-only"))(p), a),
    ),
    Case(
        "boundary drift",
        "BoundaryExceeded at routes[1].data_boundary",
        lambda p, a: (replace(p, max_data_boundary=DataBoundary.PRIVATE_SERVICE), a),
    ),
    Case(
        "logical request drift",
        "RequestDrift at attempts[1].logical_request_digest",
        lambda p, a: (p, (a[0], replace(a[1], logical_request_digest=_label("other")), a[2])),
    ),
    Case(
        "premature fallback",
        "RouteMismatch at attempts[1].route_id",
        lambda p, a: (
            p,
            (a[0], replace(a[2], attempt_ordinal=2, start_ms=1_350, not_before_ms=1_350)),
        ),
    ),
    Case("non-retryable failure", "terminal stop_non_retryable", _fail_first(OutcomeKind.REJECTED)),
    Case(
        "indeterminate outcome",
        "terminal stop_indeterminate",
        _fail_first(OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE),
    ),
    Case(
        "total attempt budget",
        "terminal stop_attempt_budget",
        lambda p, a: (replace(p, max_total_attempts=2), a[:2]),
    ),
    Case(
        "cost budget",
        "terminal stop_cost_budget",
        lambda p, a: (replace(p, max_total_cost_micros=600_000), a[:2]),
    ),
    Case("deadline", "terminal stop_deadline", lambda p, a: (replace(p, deadline_ms=1_650), a[:2])),
    Case(
        "route exhaustion",
        "terminal stop_route_exhausted",
        lambda p, a: (
            p,
            (
                *a[:2],
                replace(a[2], outcome=Outcome.RETRYABLE, outcome_kind=OutcomeKind.UNAVAILABLE),
            ),
        ),
    ),
)


def _observe(policy: RetryPolicy, attempts: tuple[ObservedAttempt, ...]) -> str:
    try:
        receipt = evaluate(policy, attempts)
    except (PolicyError, AttemptRejected) as exc:
        return f"{type(exc).__name__} at {exc.field}"
    return f"terminal {receipt.terminal.value if receipt.terminal else 'none'}"


def build_report() -> dict[str, Any]:
    """The lab report as a JSON object (integers and strings only)."""
    policy, attempts = reference_policy(), reference_attempts()
    receipt = evaluate(policy, attempts)
    final = receipt.decisions[-1]
    on_fallback = next(r for r in policy.routes if r.route_id == final.route_id).priority > 0
    if receipt.terminal is Terminal.COMPLETE:
        baseline = "completed on compatible fallback" if on_fallback else "completed on primary"
    else:
        baseline = f"failed: {receipt.terminal}"
    cases = []
    for case in CASES:
        observed = _observe(*case.mutate(policy, attempts))
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
        "attempts_sha256": attempts_sha256(attempts),
        "receipt_sha256": receipt_sha256(receipt),
        "receipt": receipt_to_obj(receipt),
    }


@dataclass(frozen=True, slots=True)
class LabResult:
    report: dict[str, Any]
    report_bytes: bytes
    path: Path | None

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
        return "\n".join(f"{k:<20}{v}" for k, v in lines) + "\n"


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
