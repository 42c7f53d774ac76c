"""Receipts as canonical JSON, their SHA-256 digests, and replay.

A receipt's JSON carries the full policy, the admission (request digests and deadline),
the observed attempts and the gates (shared guards' verdicts with their snapshots) next to
the decisions and terminal, with ``policy_sha256`` and ``attempts_sha256``;
``receipt_sha256`` is the SHA-256 of the receipt's canonical bytes (canonical JSON,
integers only). :func:`replay` decodes a receipt strictly, re-runs the evaluator on the
recorded inputs, and reports every field whose recorded value differs from the recomputed
one — a mutated decision, terminal, delay or digest is named by its JSON path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from retryscope.canonical import canonical_json, sha256_hex
from retryscope.control._evaluator import (
    AttemptRejected,
    DecisionRecord,
    ObservedAttempt,
    PlannedAttempt,
    Receipt,
    evaluate,
)
from retryscope.control._guards import Gate, GuardKind, GuardSnapshot
from retryscope.control._policy import (
    PolicyError,
    RetryPolicy,
    admission_from_obj,
    admission_to_obj,
    policy_from_obj,
    policy_to_obj,
)
from retryscope.control._schedule import ArithmeticOverflow
from retryscope.control._strict import UINT32_MAX, DecodeError, Fields, load_json
from retryscope.vocabulary import HedgeResult, Outcome, OutcomeKind


def _enum_value(value: Any) -> Any:
    return None if value is None else value.value


def attempt_to_obj(a: ObservedAttempt) -> dict[str, Any]:
    return {
        "route_id": a.route_id,
        "route_release": a.route_release,
        "route_attempt_ordinal": a.route_attempt_ordinal,
        "attempt_ordinal": a.attempt_ordinal,
        "logical_request_digest": a.logical_request_digest,
        "idempotency_digest": a.idempotency_digest,
        "start_ms": a.start_ms,
        "end_ms": a.end_ms,
        "outcome": a.outcome.value,
        "outcome_kind": _enum_value(a.outcome_kind),
        "not_before_ms": a.not_before_ms,
        "backoff_delay_ms": a.backoff_delay_ms,
        "retry_after_ms": a.retry_after_ms,
        "cost_reserved_micros": a.cost_reserved_micros,
        "cost_actual_micros": a.cost_actual_micros,
        "hedge_ordinal": a.hedge_ordinal,
        "hedge_result": _enum_value(a.hedge_result),
        "cancelled": a.cancelled,
    }


def attempt_from_obj(raw: Any, path: str) -> ObservedAttempt:
    """Strictly decode one attempt object."""
    f = Fields(raw, path)
    a = ObservedAttempt(
        route_id=f.string("route_id"),
        route_release=f.string("route_release"),
        route_attempt_ordinal=f.integer("route_attempt_ordinal", maximum=UINT32_MAX),
        attempt_ordinal=f.integer("attempt_ordinal", maximum=UINT32_MAX),
        logical_request_digest=f.string("logical_request_digest"),
        idempotency_digest=f.string("idempotency_digest"),
        start_ms=f.integer("start_ms"),
        end_ms=f.integer("end_ms"),
        outcome=f.enum("outcome", Outcome),
        outcome_kind=f.opt_enum("outcome_kind", OutcomeKind),
        not_before_ms=f.opt_integer("not_before_ms"),
        backoff_delay_ms=f.opt_integer("backoff_delay_ms"),
        retry_after_ms=f.opt_integer("retry_after_ms"),
        cost_reserved_micros=f.opt_integer("cost_reserved_micros"),
        cost_actual_micros=f.opt_integer("cost_actual_micros"),
        hedge_ordinal=f.opt_integer("hedge_ordinal", maximum=UINT32_MAX),
        hedge_result=f.opt_enum("hedge_result", HedgeResult),
        cancelled=bool(f.raw("cancelled", required=False)),
    )
    f.done()
    return a


def gate_to_obj(g: Gate) -> dict[str, Any]:
    s = g.snapshot
    return {
        "attempt_ordinal": g.attempt_ordinal,
        "route_id": g.route_id,
        "admitted": g.admitted,
        "guard": s.guard.value,
        "name": s.name,
        "generation": s.generation,
        "state": s.state,
        "tokens": s.tokens,
        "at_ms": s.at_ms,
        "hedge_ordinal": g.hedge_ordinal,
    }


def gate_from_obj(raw: Any, path: str) -> Gate:
    """Strictly decode one gate object."""
    f = Fields(raw, path)
    gate = Gate(
        attempt_ordinal=f.integer("attempt_ordinal", maximum=UINT32_MAX),
        route_id=f.string("route_id"),
        admitted=f.boolean("admitted"),
        snapshot=GuardSnapshot(
            guard=f.enum("guard", GuardKind),
            name=f.string("name"),
            generation=f.integer("generation"),
            state=f.string("state"),
            tokens=f.integer("tokens"),
            at_ms=f.integer("at_ms"),
        ),
        hedge_ordinal=f.opt_integer("hedge_ordinal", maximum=UINT32_MAX),
    )
    f.done()
    return gate


def _decision_to_obj(d: DecisionRecord) -> dict[str, Any]:
    return {
        "attempt_ordinal": d.attempt_ordinal,
        "route_id": d.route_id,
        "route_attempt_ordinal": d.route_attempt_ordinal,
        "outcome": d.outcome.value,
        "outcome_kind": _enum_value(d.outcome_kind),
        "decision": d.decision.value,
        "terminal": _enum_value(d.terminal),
        "spent_micros": d.spent_micros,
        "next_route_id": d.next_route_id,
        "next_route_attempt_ordinal": d.next_route_attempt_ordinal,
        "next_delay_ms": d.next_delay_ms,
        "next_not_before_ms": d.next_not_before_ms,
        "hedge_result": _enum_value(d.hedge_result),
    }


def _plan_to_obj(p: PlannedAttempt | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "route_id": p.route.route_id,
        "route_release": p.route.route_release_sha256,
        "attempt_ordinal": p.attempt_ordinal,
        "route_attempt_ordinal": p.route_attempt_ordinal,
        "decision": _enum_value(p.decision),
        "retry_after_ms": p.retry_after_ms,
        "delay_low_ms": p.delay_low_ms,
        "delay_high_ms": p.delay_high_ms,
        "delay_ms": p.delay_ms,
        "not_before_ms": p.not_before_ms,
        "reserve_micros": p.reserve_micros,
        "hedge_ordinal": p.hedge_ordinal,
    }


def policy_sha256(policy: RetryPolicy) -> str:
    """SHA-256 of the policy's canonical JSON."""
    return sha256_hex(canonical_json(policy_to_obj(policy), integers_only=True))


def attempts_sha256(attempts: Iterable[ObservedAttempt]) -> str:
    """SHA-256 of the canonical JSON array of observed attempts."""
    objs = [attempt_to_obj(a) for a in attempts]
    return sha256_hex(canonical_json(objs, integers_only=True))


def receipt_to_obj(receipt: Receipt) -> dict[str, Any]:
    return {
        "policy": policy_to_obj(receipt.policy),
        "policy_sha256": policy_sha256(receipt.policy),
        "admission": admission_to_obj(receipt.admission),
        "attempts": [attempt_to_obj(a) for a in receipt.attempts],
        "gates": [gate_to_obj(g) for g in receipt.gates],
        "attempts_sha256": attempts_sha256(receipt.attempts),
        "decisions": [_decision_to_obj(d) for d in receipt.decisions],
        "terminal": _enum_value(receipt.terminal),
        "spent_micros": receipt.spent_micros,
        "next_attempt": _plan_to_obj(receipt.next_attempt),
        "evaluated_at_ms": receipt.evaluated_at_ms,
        "cancelled_at_ms": receipt.cancelled_at_ms,
    }


def receipt_json(receipt: Receipt) -> bytes:
    """The receipt's canonical JSON bytes."""
    return canonical_json(receipt_to_obj(receipt), integers_only=True)


def receipt_sha256(receipt: Receipt) -> str:
    return sha256_hex(receipt_json(receipt))


@dataclass(frozen=True, slots=True)
class Drift:
    """One field whose recorded value differs from the recomputed one."""

    field: str
    recorded: Any
    recomputed: Any


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """Result of :func:`replay`; ``ok`` when nothing drifted and evaluation succeeded."""

    drift: tuple[Drift, ...]
    error: str | None
    recorded_sha256: str
    recomputed_sha256: str | None

    @property
    def ok(self) -> bool:
        return not self.drift and self.error is None


def _diff(recorded: Any, recomputed: Any, path: str, out: list[Drift]) -> None:
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        for key in sorted(set(recorded) | set(recomputed)):
            _diff(recorded.get(key), recomputed.get(key), f"{path}.{key}", out)
    elif isinstance(recorded, list) and isinstance(recomputed, list):
        for i in range(max(len(recorded), len(recomputed))):
            left = recorded[i] if i < len(recorded) else None
            right = recomputed[i] if i < len(recomputed) else None
            _diff(left, right, f"{path}[{i}]", out)
    elif type(recorded) is not type(recomputed) or recorded != recomputed:
        out.append(Drift(path, recorded, recomputed))


def replay(receipt_bytes: str | bytes) -> ReplayReport:
    """Recompute a receipt from its recorded policy and attempts; report drift by field.

    Undecodable input raises :class:`~retryscope.control._strict.DecodeError`; a
    policy or attempt the evaluator rejects is reported as ``error`` (type and field).
    """
    raw = receipt_bytes.encode("utf-8") if isinstance(receipt_bytes, str) else receipt_bytes
    recorded = load_json(raw)
    f = Fields(recorded, "")
    policy = policy_from_obj(f.raw("policy"), validate=False)
    admission = admission_from_obj(f.raw("admission"))
    attempts = [attempt_from_obj(a, f"attempts[{i}]") for i, a in enumerate(f.array("attempts"))]
    gates = [gate_from_obj(g, f"gates[{i}]") for i, g in enumerate(f.array("gates"))]
    evaluated_at = f.opt_integer("evaluated_at_ms")
    cancelled_at = f.opt_integer("cancelled_at_ms")
    for name in ("policy_sha256", "attempts_sha256", "decisions", "terminal", "spent_micros"):
        f.raw(name)
    f.raw("next_attempt")
    f.done()
    recorded_sha = sha256_hex(raw)
    try:
        receipt = evaluate(
            policy,
            admission,
            attempts,
            gates=gates,
            now_ms=evaluated_at,
            cancelled_at_ms=cancelled_at,
        )
    except (PolicyError, AttemptRejected, ArithmeticOverflow) as exc:
        return ReplayReport((), f"{type(exc).__name__}: {exc}", recorded_sha, None)
    recomputed = receipt_to_obj(receipt)
    drift: list[Drift] = []
    _diff(recorded, recomputed, "$", drift)
    return ReplayReport(tuple(drift), None, recorded_sha, receipt_sha256(receipt))


__all__ = [
    "DecodeError",
    "Drift",
    "ReplayReport",
    "attempt_from_obj",
    "attempt_to_obj",
    "attempts_sha256",
    "gate_from_obj",
    "gate_to_obj",
    "policy_sha256",
    "receipt_json",
    "receipt_sha256",
    "receipt_to_obj",
    "replay",
]
