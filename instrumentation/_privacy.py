"""Bounds and an opt-in hook for what reaches a span.

retryscope never writes raw idempotency keys, prompts, request bodies or API keys: those
become digests (:mod:`retryscope.instrumentation._digests`). What remains is bounded here:
string values longer than a configurable number of UTF-8 bytes (default 4 KiB) are cut on a
character boundary and the key is listed under ``retryscope.truncated_keys``, so a reader
knows the value is partial. An :data:`AttributeHook` lets the application add attributes or
redact ones other libraries set (a returned ``None`` replaces the value with ``[redacted]``).
Secrets in URLs, captured headers and exception text are redacted by pattern
(:mod:`retryscope.instrumentation._redaction`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from opentelemetry.util.types import AttributeValue

from retryscope.vocabulary import REDACTED, TRUNCATED_KEYS_KEY

DEFAULT_MAX_STRING_BYTES: Final = 4096

AttributeHook = Callable[[Mapping[str, AttributeValue]], Mapping[str, AttributeValue | None]]
"""Given a span's start attributes, return attributes to add or override (None: redact)."""


def bound_str(value: str, max_bytes: int) -> tuple[str, bool]:
    """``value`` cut to at most ``max_bytes`` UTF-8 bytes on a character boundary."""
    if len(value) * 4 <= max_bytes:  # cannot exceed the bound: skip encoding
        return value, False
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return value, False
    return raw[:max_bytes].decode("utf-8", "ignore"), True


def _bound_value(value: AttributeValue, max_bytes: int) -> tuple[AttributeValue, bool]:
    if isinstance(value, str):
        return bound_str(value, max_bytes)
    if isinstance(value, list | tuple) and value and isinstance(value[0], str):
        cut = False
        items: list[str] = []
        for item in value:
            bounded, was_cut = bound_str(str(item), max_bytes)
            items.append(bounded)
            cut = cut or was_cut
        return items, cut
    return value, False


def bound_attributes(
    attributes: Mapping[str, AttributeValue], max_bytes: int = DEFAULT_MAX_STRING_BYTES
) -> dict[str, AttributeValue]:
    """A copy with every string (and string list item) bounded; truncated keys are listed."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes!r}")
    out: dict[str, AttributeValue] = {}
    truncated: list[str] = []
    for key, value in attributes.items():
        bounded, cut = _bound_value(value, max_bytes)
        out[key] = bounded
        if cut:
            truncated.append(key)
    if truncated:
        out[TRUNCATED_KEYS_KEY] = sorted(truncated)
    return out


def apply_hook(
    hook: AttributeHook, attributes: Mapping[str, AttributeValue], max_bytes: int
) -> dict[str, AttributeValue]:
    """Run ``hook`` and turn its answer into bounded attributes to set (redactions marked)."""
    changes = hook(attributes)
    resolved: dict[str, AttributeValue] = {
        key: REDACTED if value is None else value for key, value in changes.items()
    }
    return bound_attributes(resolved, max_bytes)
