"""Policy validation (single ownership, exact compatibility, boundary) and strict decoding."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from retryscope.instrumentation._digests import canonical_json
from retryscope.instrumentation.control import _policy as pol
from retryscope.instrumentation.control._lab import FALLBACK, PRIMARY, reference_policy
from retryscope.instrumentation.control._strict import (
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
            _with_route(1, capability_contract_sha256="a" * 64),
            pol.CapabilityMismatch,
            "routes[1].capability_contract_sha256",
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
            replace(reference_policy(), idempotency_key_sha256="XYZ"),
            pol.InvalidDigest,
            "idempotency_key_sha256",
        ),
    ],
)
def test_each_validation_failure_is_its_own_error_naming_the_field(
    policy: pol.RetryPolicy, error: type[pol.PolicyError], field: str
) -> None:
    with pytest.raises(error) as err:
        pol.validate_policy(policy)
    assert type(err.value) is error
    assert err.value.field == field


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


def test_json_round_trip_is_exact() -> None:
    text = canonical_json(_json(), integers_only=True)
    assert pol.policy_from_json(text) == reference_policy()


TOML = """
retry_owner = "harness"
logical_request_sha256 = "{req}"
idempotency_key_sha256 = "{idem}"
capability_contract_sha256 = "{cap}"
behavior_class_sha256 = "{beh}"
max_data_boundary = "external_provider"
base_backoff_ms = 200
max_backoff_ms = 1500
max_retry_after_ms = 2000
max_total_attempts = 4
max_total_cost_micros = 1000000
deadline_ms = 5000

[jitter]
scheduler_release = "scheduler-2026.11"
seed = 42
"""


def _toml_text() -> str:
    p = reference_policy()
    text = TOML.format(
        req=p.logical_request_sha256,
        idem=p.idempotency_key_sha256,
        cap=p.capability_contract_sha256,
        beh=p.behavior_class_sha256,
    )
    for r in p.routes:
        text += "\n[[routes]]\n" + "\n".join(
            f"{k} = {json.dumps(v)}" for k, v in pol.route_to_obj(r).items()
        )
    return text


def test_toml_decodes_to_the_same_policy_with_jitter() -> None:
    decoded = pol.policy_from_toml(_toml_text())
    assert decoded == replace(
        reference_policy(), jitter=pol.Jitter(scheduler_release="scheduler-2026.11", seed=42)
    )


@pytest.mark.parametrize(
    ("mutate", "error", "field"),
    [
        (lambda o: o.update(surprise=1), UnknownField, "surprise"),
        (lambda o: o["routes"][0].update(model_url="x"), UnknownField, "routes[0].model_url"),
        (lambda o: o.pop("deadline_ms"), MissingField, "deadline_ms"),
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
        pol.policy_from_json(base[:-1] + ', "deadline_ms": 1}')
    with pytest.raises(InvalidValue, match="non-finite"):
        pol.policy_from_json(base.replace('"deadline_ms": 5000', '"deadline_ms": NaN'))
    with pytest.raises(WrongType):
        pol.policy_from_json(base.replace('"deadline_ms": 5000', '"deadline_ms": 5e3'))


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
