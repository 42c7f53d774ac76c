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
from dataclasses import dataclass, fields
from typing import Any

from retryscope.canonical import canonical_json, sha256_hex
from retryscope.control._evaluator import (
    AttemptRejected,
    ObservedAttempt,
    Receipt,
    evaluate,
)
from retryscope.control._guards import Gate, GuardKind, GuardSnapshot
from retryscope.control._policy import Admission, PolicyError, RetryPolicy, policy_from_obj
from retryscope.control._schedule import ArithmeticOverflow, PlannedAttempt
from retryscope.control._strict import (
    UINT32_MAX,
    Fields,
    from_obj,
    load_json,
    to_obj,
)


def gate_to_obj(g: Gate) -> dict[str, Any]:
    """A gate as one flat object: its fields and its snapshot's."""
    obj: dict[str, Any] = to_obj(g)
    snapshot: dict[str, Any] = obj.pop("snapshot")
    return obj | snapshot


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


def _plan_to_obj(p: PlannedAttempt | None) -> dict[str, Any] | None:
    if p is None:
        return None
    obj = {f.name: to_obj(getattr(p, f.name)) for f in fields(p) if f.name != "route"}
    return obj | {"route_id": p.route.route_id, "route_release": p.route.route_release_sha256}


def policy_sha256(policy: RetryPolicy) -> str:
    """SHA-256 of the policy's canonical JSON."""
    return sha256_hex(canonical_json(to_obj(policy), integers_only=True))


def attempts_sha256(attempts: Iterable[ObservedAttempt]) -> str:
    """SHA-256 of the canonical JSON array of observed attempts."""
    return sha256_hex(canonical_json(to_obj(tuple(attempts)), integers_only=True))


def receipt_to_obj(receipt: Receipt) -> dict[str, Any]:
    return {
        "policy": to_obj(receipt.policy),
        "policy_sha256": policy_sha256(receipt.policy),
        "admission": to_obj(receipt.admission),
        "attempts": to_obj(receipt.attempts),
        "gates": [gate_to_obj(g) for g in receipt.gates],
        "attempts_sha256": attempts_sha256(receipt.attempts),
        "decisions": to_obj(receipt.decisions),
        "terminal": to_obj(receipt.terminal),
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
    admission = from_obj(Admission, f.raw("admission"), "admission")
    attempts = [
        from_obj(ObservedAttempt, a, f"attempts[{i}]") for i, a in enumerate(f.array("attempts"))
    ]
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
