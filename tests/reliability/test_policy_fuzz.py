"""Hypothesis policy documents into the control plane's strict decoding: only valid policies
pass, everything else fails with a DecodeError/PolicyError naming the field; JSON and TOML
decode the same document to the same answer."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.control._capability import (
    OUTPUT_MODE_RANK,
    CapabilityContract,
)
from retryscope.control._lab import FALLBACK, reference_policy
from retryscope.control._policy import (
    CircuitBreakerPolicy,
    HedgePolicy,
    Jitter,
    PolicyError,
    RetryBudgetPolicy,
    RetryPolicy,
    policy_from_json,
    policy_from_toml,
    policy_to_obj,
)
from retryscope.control._strict import DecodeError
from retryscope.vocabulary import BOUNDARY_RANK, RetryOwner

BASE = policy_to_obj(
    replace(
        reference_policy(),
        jitter=Jitter("scheduler-2026.11", 42),
        retry_budget=RetryBudgetPolicy(20, 3),
        circuit_breaker=CircuitBreakerPolicy(50, 10, 30_000, 5_000, 2),
        hedging=HedgePolicy(FALLBACK.route_id, 300, 1, 10, 1),
    )
)
SHA = re.compile(r"[0-9a-f]{64}")

LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(0, 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=70),
    st.sampled_from(
        ["harness", "sdk", "external_provider", "private_service", "local_process", "0" * 64]
    ),
)
JSON_VALUE = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: str = "") -> list[tuple[str, list[Any]]]:
    """(dotted path as the decoder names it, key path) of every field."""
    out: list[tuple[str, list[Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            out.append((path, [key]))
            out.extend((p, [key, *k]) for p, k in _paths(value, path))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            path = f"{prefix}[{i}]"
            out.append((path, [i]))
            out.extend((p, [i, *k]) for p, k in _paths(value, path))
    return out


PATHS = _paths(BASE)


@st.composite
def documents(draw: Any) -> tuple[dict[str, Any], str | None]:
    """A policy object with 0–3 mutations; the path of the first one (None if unmutated)."""
    doc = copy.deepcopy(BASE)
    first: str | None = None
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path, keys = draw(st.sampled_from(paths))
        parent = doc
        for k in keys[:-1]:
            parent = parent[k]
        kind = draw(st.sampled_from(["replace", "delete", "add"]))
        if kind == "replace":
            parent[keys[-1]] = draw(JSON_VALUE)
        elif kind == "delete" and isinstance(parent, dict):
            del parent[keys[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(JSON_VALUE)
        first = first or path
    return doc, first


def _toml_str(text: str) -> str:
    """A TOML basic string (JSON's escapes of astral characters are not valid TOML)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    return (
        "{"
        + ", ".join(f"{_toml_str(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        + "}"
    )


def _toml(doc: dict[str, Any]) -> str:
    return "".join(f"{_toml_str(k)} = {_toml_value(v)}\n" for k, v in doc.items() if v is not None)


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value if v is not None]
    return value


def _satisfies(needed: CapabilityContract, offered: CapabilityContract) -> bool:
    """The capability rules restated: needed ⊆ offered, sizes within bounds, a mode at least
    as strict, the same output schema, streaming events present, residency and retention."""
    return (
        needed.input_modalities <= offered.input_modalities
        and needed.output_modalities <= offered.output_modalities
        and offered.context_tokens >= needed.context_tokens
        and offered.output_tokens >= needed.output_tokens
        and OUTPUT_MODE_RANK[offered.output_mode] >= OUTPUT_MODE_RANK[needed.output_mode]
        and (needed.output_schema_sha256 in (None, offered.output_schema_sha256))
        and needed.tools <= offered.tools
        and (offered.stream_terminal_event or not needed.stream_terminal_event)
        and (offered.stream_usage_event or not needed.stream_usage_event)
        and bool(offered.regions)
        and offered.regions <= needed.regions
        and offered.retention_days <= needed.retention_days
    )


def _protections_valid(p: RetryPolicy) -> bool:
    ids = {r.route_id: r for r in p.routes}
    b, c, h = p.retry_budget, p.circuit_breaker, p.hedging
    return (
        (b is None or b.budget_percent <= 100)
        and (
            c is None
            or (
                1 <= c.failure_percent <= 100
                and c.minimum_throughput >= 1
                and c.sampling_duration_ms >= 10
                and c.break_duration_ms >= 1
                and c.half_open_probes >= 1
            )
        )
        and (
            h is None
            or (
                h.route_id in ids
                and ids[h.route_id].priority > 0
                and h.delay_ms >= 1
                and 1 <= h.max_hedges <= ids[h.route_id].max_attempts
                and h.budget_percent <= 100
            )
        )
        and p.polling.interval_ms >= 1
        and p.polling.max_polls >= 1
    )


def _is_valid(p: RetryPolicy) -> bool:
    """An oracle written from the rules (not from the validator's code)."""
    digests = [p.behavior_class_sha256]
    digests += [r.behavior_evidence.evaluation_sha256 for r in p.routes]
    if p.capability.output_schema_sha256 is not None:
        digests.append(p.capability.output_schema_sha256)
    routes = p.routes
    return (
        p.retry_owner is RetryOwner.HARNESS
        and all(SHA.fullmatch(d) for d in digests)
        and p.base_backoff_ms <= p.max_backoff_ms
        and p.max_total_attempts >= 1
        and len(routes) >= 1
        and sorted(r.priority for r in routes) == list(range(len(routes)))
        and len({r.route_id for r in routes}) == len(routes)
        and all(r.route_id for r in routes)
        and len({r.route_release_sha256 for r in routes}) == len(routes)
        and all(SHA.fullmatch(r.route_release_sha256) for r in routes)
        and all(_satisfies(p.capability, r.capability) for r in routes)
        and all(r.behavior_class_sha256 == p.behavior_class_sha256 for r in routes)
        and all(
            p.freshness_bound_ms is None or r.staleness_ms <= p.freshness_bound_ms for r in routes
        )
        and all(
            BOUNDARY_RANK[r.data_boundary] <= BOUNDARY_RANK[p.max_data_boundary] for r in routes
        )
        and all(r.supports_idempotency and r.max_attempts >= 1 for r in routes)
        and (p.jitter is None or bool(p.jitter.scheduler_release))
        and _protections_valid(p)
    )


def _decode(decoder: Any, text: str) -> RetryPolicy | Exception:
    try:
        return decoder(text)  # type: ignore[no-any-return]
    except (DecodeError, PolicyError) as exc:  # anything else is a bug and fails the test
        return exc


def _shape(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


@settings(max_examples=150, deadline=None)
@given(documents())
def test_only_valid_policies_pass_and_errors_name_the_field(case: Any) -> None:
    doc, first = case
    result = _decode(policy_from_json, json.dumps(doc))
    if isinstance(result, RetryPolicy):
        assert _is_valid(result)
        assert policy_from_json(json.dumps(policy_to_obj(result))) == result  # exact
        return
    field = result.field  # type: ignore[attr-defined]
    assert field, result
    named = {_shape(p) for p, _ in _paths(doc) + PATHS} | {"$", "routes.priority"}
    assert _shape(field) in named, field  # a field of the document or of the format
    assert field in str(result)
    if first is None:
        raise AssertionError(f"the unmutated policy failed: {result}")


@settings(max_examples=100, deadline=None)
@given(documents())
def test_toml_and_json_decode_the_same_document_alike(case: Any) -> None:
    doc = _strip_none(case[0])  # TOML has no null
    from_json = _decode(policy_from_json, json.dumps(doc))
    from_toml = _decode(policy_from_toml, _toml(doc))
    if isinstance(from_json, RetryPolicy):
        assert from_toml == from_json
    else:
        assert type(from_toml) is type(from_json), (from_json, from_toml)
        assert from_toml.field == from_json.field  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_arbitrary_bytes_and_text_fail_cleanly(raw: bytes | str) -> None:
    result = _decode(policy_from_json, raw)
    assert not isinstance(result, RetryPolicy)
    if isinstance(raw, str):
        assert not isinstance(_decode(policy_from_toml, raw), RetryPolicy)
