"""Policy validation (single ownership, structured compatibility, boundary, preconditions),
admission, and strict decoding."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from retryscope.canonical import canonical_json
from retryscope.control import _capability as cap
from retryscope.control import _policy as pol
from retryscope.control._lab import (
    FALLBACK,
    PRIMARY,
    REQUIRED,
    TEXT_ONLY,
    reference_admission,
    reference_policy,
)
from retryscope.control._strict import (
    IntegerOutOfRange,
    InvalidValue,
    MissingField,
    UnknownField,
    WrongType,
)
from retryscope.vocabulary import DataBoundary, RetryOwner


def _json() -> dict[str, object]:
    return pol.policy_to_obj(reference_policy())


def _with_route(index: int, **changes: object) -> pol.RetryPolicy:
    p = reference_policy()
    routes = list(p.routes)
    routes[index] = replace(routes[index], **changes)  # type: ignore[arg-type]
    return replace(p, routes=tuple(routes))


def test_only_the_harness_is_accepted_as_owner_by_default() -> None:
    for owner in (RetryOwner.ADAPTER, RetryOwner.TRANSPORT_SDK, RetryOwner.WORKFLOW):
        with pytest.raises(pol.OwnerNotAccepted) as err:
            pol.validate_policy(replace(reference_policy(), retry_owner=owner))
        assert err.value.field == "retry_owner"
    workflow = replace(reference_policy(), retry_owner=RetryOwner.WORKFLOW)
    assert pol.validate_policy(workflow, accepted_owners={RetryOwner.WORKFLOW}) is workflow


def test_decoding_keeps_the_owner_distinction_and_one_owner_only() -> None:
    obj = _json()
    obj["retry_owner"] = "transport_sdk"
    decoded = pol.policy_from_obj(obj, validate=False)
    assert decoded.retry_owner is RetryOwner.TRANSPORT_SDK
    with pytest.raises(pol.OwnerNotAccepted):
        pol.policy_from_obj(obj)
    obj["retry_owner"] = ["harness", "adapter"]
    with pytest.raises(WrongType) as err:
        pol.policy_from_obj(obj)
    assert err.value.field == "retry_owner"


@pytest.mark.parametrize(
    ("policy", "error", "field"),
    [
        (_with_route(1, priority=2), pol.PriorityGap, "routes.priority"),
        (_with_route(1, route_id="private-primary"), pol.DuplicateRouteId, "routes[1].route_id"),
        (
            _with_route(1, route_release_sha256=PRIMARY.route_release_sha256),
            pol.DuplicateRouteRelease,
            "routes[1].route_release_sha256",
        ),
        (
            _with_route(1, capability=replace(FALLBACK.capability, output_tokens=999)),
            pol.CapabilityMismatch,
            "routes[1].capability.output_tokens",
        ),
        (
            _with_route(
                1, capability=replace(FALLBACK.capability, output_mode=cap.OutputMode.JSON)
            ),
            pol.OutputContractMismatch,
            "routes[1].capability.output_mode",
        ),
        (
            _with_route(0, capability=replace(PRIMARY.capability, regions=frozenset())),
            pol.ResidencyViolation,
            "routes[0].capability.regions",
        ),
        (
            _with_route(1, capability=replace(FALLBACK.capability, stream_usage_event=False)),
            None,
            None,
        ),
        (
            _with_route(0, staleness_ms=60_001),
            pol.FreshnessExceeded,
            "routes[0].staleness_ms",
        ),
        (
            _with_route(
                1,
                behavior_evidence=pol.BehaviorEvidence(
                    "nope", FALLBACK.behavior_evidence.expires_at_ms
                ),
            ),
            pol.InvalidDigest,
            "routes[1].behavior_evidence.evaluation_sha256",
        ),
        (
            _with_route(0, behavior_class_sha256="b" * 64),
            pol.BehaviorMismatch,
            "routes[0].behavior_class_sha256",
        ),
        (
            replace(reference_policy(), max_data_boundary=DataBoundary.PRIVATE_SERVICE),
            pol.BoundaryExceeded,
            "routes[1].data_boundary",
        ),
        (
            _with_route(1, supports_idempotency=False),
            pol.IdempotencyUnsupported,
            "routes[1].supports_idempotency",
        ),
        (_with_route(0, max_attempts=0), pol.InvalidAttemptLimit, "routes[0].max_attempts"),
        (_with_route(0, max_attempts=2**32), pol.InvalidAttemptLimit, "routes[0].max_attempts"),
        (replace(reference_policy(), routes=()), pol.NoRoutes, "routes"),
        (
            replace(reference_policy(), base_backoff_ms=2_000),
            pol.InvalidBackoff,
            "base_backoff_ms",
        ),
        (
            replace(reference_policy(), behavior_class_sha256="XYZ"),
            pol.InvalidDigest,
            "behavior_class_sha256",
        ),
        (
            replace(reference_policy(), retry_budget=pol.RetryBudgetPolicy(101, 3)),
            pol.InvalidProtection,
            "retry_budget.budget_percent",
        ),
        (
            replace(
                reference_policy(), circuit_breaker=pol.CircuitBreakerPolicy(50, 1, 9, 1_000, 1)
            ),
            pol.InvalidProtection,
            "circuit_breaker.sampling_duration_ms",
        ),
        (
            replace(
                reference_policy(), circuit_breaker=pol.CircuitBreakerPolicy(50, 1, 10, 1_000, 0)
            ),
            pol.InvalidProtection,
            "circuit_breaker.half_open_probes",
        ),
        (
            replace(
                reference_policy(),
                hedging=pol.HedgePolicy(PRIMARY.route_id, 300, 1, 10, 1),
            ),
            pol.InvalidProtection,
            "hedging.route_id",
        ),
        (
            replace(
                reference_policy(),
                hedging=pol.HedgePolicy(FALLBACK.route_id, 300, 2, 10, 1),
            ),
            pol.InvalidProtection,
            "hedging.max_hedges",
        ),
        (
            replace(reference_policy(), polling=pol.PollPolicy(0, 3)),
            pol.InvalidProtection,
            "polling.interval_ms",
        ),
    ],
)
def test_each_validation_failure_is_its_own_error_naming_the_field(
    policy: pol.RetryPolicy, error: type[pol.PolicyError] | None, field: str | None
) -> None:
    if error is None:  # the request needs no usage event: a route without one is fine
        assert pol.validate_policy(policy) is policy
        return
    with pytest.raises(error) as err:
        pol.validate_policy(policy)
    assert type(err.value) is error
    assert err.value.field == field


def test_a_text_only_route_is_rejected_for_an_image_grounded_request_by_modality() -> None:
    """Exercise 4: the rejection comes from validation, before any attempt, naming the field
    and the missing modality; the same route is fine for a text-only request."""
    grounded = replace(
        reference_policy(),
        capability=replace(
            REQUIRED, input_modalities=frozenset({cap.Modality.TEXT, cap.Modality.IMAGE})
        ),
        routes=(PRIMARY, FALLBACK, TEXT_ONLY),
    )
    with pytest.raises(pol.CapabilityMismatch) as err:
        pol.validate_policy(grounded)
    assert err.value.field == "routes[2].capability.input_modalities"
    assert "image" in str(err.value)
    (gap,) = err.value.gaps
    assert (gap.field, gap.needed, gap.offered) == ("input_modalities", ["image", "text"], ["text"])
    text_only = replace(grounded, capability=REQUIRED)
    assert pol.validate_policy(text_only) is text_only


@pytest.mark.parametrize(
    ("field", "needed", "offered", "compatible"),
    [
        ("context_tokens", 8_000, 8_000, True),
        ("context_tokens", 8_000, 7_999, False),
        ("output_tokens", 1_000, 1_000, True),
        ("output_tokens", 1_000, 999, False),
        ("retention_days", 30, 30, True),
        ("retention_days", 30, 31, False),
        ("output_mode", cap.OutputMode.JSON, cap.OutputMode.JSON, True),
        ("output_mode", cap.OutputMode.JSON, cap.OutputMode.JSON_SCHEMA, True),
        ("output_mode", cap.OutputMode.JSON_SCHEMA, cap.OutputMode.JSON, False),
        ("stream_terminal_event", True, True, True),
        ("stream_terminal_event", True, False, False),
        ("stream_terminal_event", False, False, True),
        ("tools", frozenset({cap.ToolFeature.FUNCTION_CALLING}), frozenset(), False),
        (
            "tools",
            frozenset({cap.ToolFeature.FUNCTION_CALLING}),
            frozenset({cap.ToolFeature.FUNCTION_CALLING, cap.ToolFeature.PARALLEL_CALLS}),
            True,
        ),
        (
            "output_modalities",
            frozenset({cap.Modality.AUDIO}),
            frozenset({cap.Modality.TEXT}),
            False,
        ),
        ("output_modalities", frozenset({cap.Modality.TEXT}), frozenset({cap.Modality.TEXT}), True),
        ("output_schema_sha256", "a" * 64, "a" * 64, True),
        ("output_schema_sha256", "a" * 64, "b" * 64, False),
        ("output_schema_sha256", None, "b" * 64, True),
        ("stream_usage_event", True, True, True),
        ("stream_usage_event", True, False, False),
        ("regions", frozenset({"eu-west-1"}), frozenset(), False),  # no declared region
        ("regions", frozenset({"eu-west-1"}), frozenset({"eu-west-1"}), True),
        ("regions", frozenset({"eu-west-1"}), frozenset({"eu-west-1", "us-east-1"}), False),
    ],
)
def test_each_capability_field_is_compared_at_its_bound(
    field: str, needed: object, offered: object, compatible: bool
) -> None:
    gaps = cap.capability_gaps(
        replace(REQUIRED, **{field: needed}), replace(REQUIRED, **{field: offered})
    )
    assert [g.field for g in gaps] == ([] if compatible else [field])


def test_freshness_and_evidence_hold_exactly_at_their_bounds() -> None:
    at_bound = _with_route(1, staleness_ms=60_000)
    assert pol.validate_policy(at_bound) is at_bound
    expires = reference_admission().deadline_ms
    evidence = pol.BehaviorEvidence(FALLBACK.behavior_evidence.evaluation_sha256, expires)
    lasting = _with_route(1, behavior_evidence=evidence)
    assert pol.validate_admission(lasting, reference_admission()) == reference_admission()
    with pytest.raises(pol.EvidenceExpired) as err:
        pol.validate_admission(lasting, reference_admission(expires + 1))
    assert err.value.field == "routes[1].behavior_evidence.expires_at_ms"
    with pytest.raises(pol.InvalidDigest) as bad:
        pol.validate_admission(
            reference_policy(), replace(reference_admission(), idempotency_key_sha256="x")
        )
    assert bad.value.field == "admission.idempotency_key_sha256"


def test_one_policy_has_one_digest_for_every_admission() -> None:
    from retryscope.control._receipts import policy_sha256

    policy = reference_policy()
    digest = policy_sha256(policy)
    for deadline in (2_000, 5_000, 60_000):
        pol.validate_admission(policy, reference_admission(deadline))
        assert policy_sha256(policy) == digest


def test_boundary_order_allows_the_external_route_only_when_the_maximum_permits() -> None:
    assert (
        pol.validate_policy(reference_policy()).max_data_boundary is DataBoundary.EXTERNAL_PROVIDER
    )
    local_only = replace(
        reference_policy(),
        max_data_boundary=DataBoundary.PRIVATE_SERVICE,
        routes=(PRIMARY,),
    )
    assert pol.validate_policy(local_only).routes == (PRIMARY,)
    assert FALLBACK.data_boundary is DataBoundary.EXTERNAL_PROVIDER


PROTECTED = replace(
    reference_policy(),
    jitter=pol.Jitter(scheduler_release="scheduler-2026.11", seed=42),
    retry_budget=pol.RetryBudgetPolicy(budget_percent=20, min_retry_concurrency=3),
    circuit_breaker=pol.CircuitBreakerPolicy(50, 10, 30_000, 5_000, 2),
    hedging=pol.HedgePolicy(FALLBACK.route_id, 300, 1, 10, 1),
)


def test_json_round_trip_is_exact() -> None:
    for policy in (reference_policy(), PROTECTED):
        text = canonical_json(pol.policy_to_obj(policy), integers_only=True)
        assert pol.policy_from_json(text) == policy


def _toml(value: object) -> str:
    """A TOML value (inline tables; a null field is left out, as TOML has no null)."""
    if isinstance(value, dict):
        items = (f"{k} = {_toml(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(items) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _toml_text() -> str:
    obj = pol.policy_to_obj(PROTECTED)
    routes = obj.pop("routes")
    text = "".join(f"{k} = {_toml(v)}\n" for k, v in obj.items() if v is not None)
    for r in routes:
        text += "\n[[routes]]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in r.items())
    return text


def test_toml_decodes_to_the_same_policy_with_protections() -> None:
    assert pol.policy_from_toml(_toml_text()) == PROTECTED


@pytest.mark.parametrize(
    ("mutate", "error", "field"),
    [
        (lambda o: o.update(surprise=1), UnknownField, "surprise"),
        (lambda o: o["routes"][0].update(model_url="x"), UnknownField, "routes[0].model_url"),
        (lambda o: o.pop("max_total_attempts"), MissingField, "max_total_attempts"),
        (
            lambda o: o["routes"][0]["capability"].pop("regions"),
            MissingField,
            "routes[0].capability.regions",
        ),
        (
            lambda o: o["capability"].update(input_modalities=["text", "text"]),
            InvalidValue,
            "capability.input_modalities[1]",
        ),
        (
            lambda o: o["capability"].update(input_modalities=["smell"]),
            InvalidValue,
            "capability.input_modalities[]",
        ),
        (
            lambda o: o.update(retry_budget={"budget_percent": 20}),
            MissingField,
            "retry_budget.min_retry_concurrency",
        ),
        (lambda o: o.update(base_backoff_ms=200.0), WrongType, "base_backoff_ms"),
        (lambda o: o.update(base_backoff_ms="200"), WrongType, "base_backoff_ms"),
        (lambda o: o.update(max_total_attempts=True), WrongType, "max_total_attempts"),
        (lambda o: o.update(max_backoff_ms=-1), IntegerOutOfRange, "max_backoff_ms"),
        (
            lambda o: o.update(max_total_cost_micros=2**63),
            IntegerOutOfRange,
            "max_total_cost_micros",
        ),
        (lambda o: o["routes"][1].update(priority=-1), IntegerOutOfRange, "routes[1].priority"),
        (
            lambda o: o["routes"][1].update(supports_idempotency=1),
            WrongType,
            "routes[1].supports_idempotency",
        ),
        (lambda o: o.update(max_data_boundary="anywhere"), InvalidValue, "max_data_boundary"),
        (lambda o: o.update(routes={}), WrongType, "routes"),
    ],
)
def test_strict_json_decoding_rejects_bad_input(mutate, error, field) -> None:  # type: ignore[no-untyped-def]
    obj = json.loads(json.dumps(_json()))
    mutate(obj)
    with pytest.raises(error) as err:
        pol.policy_from_json(json.dumps(obj))
    assert err.value.field == field


def test_strict_json_rejects_duplicates_non_finite_and_float_syntax() -> None:
    base = json.dumps(_json())
    with pytest.raises(InvalidValue, match="duplicate"):
        pol.policy_from_json(base[:-1] + ', "max_total_attempts": 1}')
    with pytest.raises(InvalidValue, match="non-finite"):
        pol.policy_from_json(base.replace('"max_total_attempts": 4', '"max_total_attempts": NaN'))
    with pytest.raises(WrongType):
        pol.policy_from_json(base.replace('"max_total_attempts": 4', '"max_total_attempts": 4e0'))


def test_strict_toml_rejects_floats_and_unknown_tables() -> None:
    with pytest.raises(WrongType) as err:
        pol.policy_from_toml(
            _toml_text().replace("base_backoff_ms = 200", "base_backoff_ms = 200.0")
        )
    assert err.value.field == "base_backoff_ms"
    with pytest.raises(UnknownField) as unknown:
        pol.policy_from_toml(_toml_text() + "\n[extra]\nx = 1\n")
    assert unknown.value.field == "extra"
    with pytest.raises(InvalidValue):
        pol.policy_from_toml("retry_owner = ")
