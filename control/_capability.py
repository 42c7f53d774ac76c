"""The structured capability contract: what a request needs, what a route offers.

A marketing name ("supports vision", "JSON mode") is not a contract. A request states what
it needs and each route states what it offers, field by field, in one
:class:`CapabilityContract`; :func:`capability_gaps` compares them with one rule per field
and names every field the route falls short on, so a text-only route is rejected for an
image-grounded request *because of* ``input_modalities`` (missing ``image``) before any
primary attempt runs.

What each field means on either side:

* ``input_modalities`` / ``output_modalities`` — needed ⊆ offered;
* ``context_tokens`` / ``output_tokens`` — the request's size ≤ the route's bound;
* ``output_mode`` — ``free_text < json < json_schema`` (schema-constrained decoding);
  the route's mode must be at least the needed one;
* ``output_schema_sha256`` — the output contract: when the request names one, the route
  must have been validated for exactly that schema;
* ``tools`` — needed tool-call features ⊆ offered;
* ``stream_terminal_event`` / ``stream_usage_event`` — a streaming request that needs a
  terminal (or usage) event only runs on a route that emits it;
* ``regions`` — residency: where the route may process data ⊆ the regions the request
  allows;
* ``retention_days`` — the route's retention ≤ the most the request allows (0: none).

The contract's digest (:func:`capability_sha256`) is the SHA-256 of its canonical JSON, so
two contracts with the same fields have the same digest on every machine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from retryscope.canonical import canonical_json, sha256_hex
from retryscope.control._strict import to_obj


class Modality(enum.StrEnum):
    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    FILE = "file"


class OutputMode(enum.StrEnum):
    """How strictly the output's shape is enforced, weakest first."""

    FREE_TEXT = "free_text"
    JSON = "json"
    JSON_SCHEMA = "json_schema"


OUTPUT_MODE_RANK: Final[dict[OutputMode, int]] = {
    OutputMode.FREE_TEXT: 0,
    OutputMode.JSON: 1,
    OutputMode.JSON_SCHEMA: 2,
}


class ToolFeature(enum.StrEnum):
    FUNCTION_CALLING = "function_calling"
    PARALLEL_CALLS = "parallel_calls"
    FORCED_CHOICE = "forced_choice"


@dataclass(frozen=True, slots=True)
class CapabilityContract:
    """One side of the comparison; see the module docstring for each field's meaning."""

    input_modalities: frozenset[Modality]
    output_modalities: frozenset[Modality]
    context_tokens: int
    output_tokens: int
    output_mode: OutputMode
    output_schema_sha256: str | None
    tools: frozenset[ToolFeature]
    stream_terminal_event: bool
    stream_usage_event: bool
    regions: frozenset[str]
    retention_days: int


@dataclass(frozen=True, slots=True)
class CapabilityGap:
    """One field a route falls short on: what was needed, what it offers."""

    field: str
    needed: Any
    offered: Any
    message: str


GapRule = Callable[[Any, Any], str | None]
"""(needed, offered) -> None when satisfied, else what is missing."""


def _subset(needed: frozenset[Any], offered: frozenset[Any]) -> str | None:
    missing = sorted(str(m) for m in needed - offered)
    return f"lacks {', '.join(missing)}" if missing else None


def _at_most(needed: int, offered: int) -> str | None:
    return f"offers {offered}, the request needs {needed}" if offered < needed else None


def _mode(needed: OutputMode, offered: OutputMode) -> str | None:
    if OUTPUT_MODE_RANK[offered] < OUTPUT_MODE_RANK[needed]:
        return f"offers {offered.value}, the request needs {needed.value}"
    return None


def _schema(needed: str | None, offered: str | None) -> str | None:
    if needed is not None and offered != needed:
        return "was not validated for the request's output schema"
    return None


def _flag(needed: bool, offered: bool) -> str | None:
    return "does not emit it" if needed and not offered else None


def _residency(allowed: frozenset[str], offered: frozenset[str]) -> str | None:
    outside = sorted(offered - allowed)
    if not offered:
        return "declares no processing region"
    return f"may process in {', '.join(outside)}, outside the allowed regions" if outside else None


def _retention(allowed: int, offered: int) -> str | None:
    return f"retains {offered} days, at most {allowed} allowed" if offered > allowed else None


RESIDENCY_FIELDS: Final = frozenset({"regions", "retention_days"})
OUTPUT_CONTRACT_FIELDS: Final = frozenset({"output_mode", "output_schema_sha256"})

RULES: Final[tuple[tuple[str, GapRule], ...]] = (
    ("input_modalities", _subset),
    ("output_modalities", _subset),
    ("context_tokens", _at_most),
    ("output_tokens", _at_most),
    ("output_mode", _mode),
    ("output_schema_sha256", _schema),
    ("tools", _subset),
    ("stream_terminal_event", _flag),
    ("stream_usage_event", _flag),
    ("regions", _residency),
    ("retention_days", _retention),
)
"""One rule per field, in the order gaps are reported."""


def capability_gaps(
    needed: CapabilityContract, offered: CapabilityContract
) -> tuple[CapabilityGap, ...]:
    """Every field ``offered`` falls short of ``needed`` on (empty: compatible)."""
    gaps: list[CapabilityGap] = []
    for name, rule in RULES:
        want, have = getattr(needed, name), getattr(offered, name)
        problem = rule(want, have)
        if problem is not None:
            gaps.append(CapabilityGap(name, to_obj(want), to_obj(have), problem))
    return tuple(gaps)


def capability_sha256(c: CapabilityContract) -> str:
    """SHA-256 of the contract's canonical JSON."""
    return sha256_hex(canonical_json(to_obj(c), integers_only=True))
