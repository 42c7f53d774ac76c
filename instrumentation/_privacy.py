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

from retryscope.vocabulary import INVALID_KEYS_KEY, REDACTED, TRUNCATED_KEYS_KEY

DEFAULT_MAX_STRING_BYTES: Final = 4096
MAX_VALUE_DEPTH: Final = 16
"""Deepest nesting of sequences and maps kept in an attribute value."""
_PLAIN: Final = frozenset({str, bool, int, float, bytes})
_INVALID: Final = object()

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


def _plain(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is an attribute value the SDK stores without converting it: a
    scalar, or a sequence or string-keyed map of such values (at most
    :data:`MAX_VALUE_DEPTH` deep)."""
    if type(value) in _PLAIN:
        return True
    if depth >= MAX_VALUE_DEPTH:
        return False
    if isinstance(value, list | tuple):
        return all(item is None or _plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(
            type(k) is str and (item is None or _plain(item, depth + 1))
            for k, item in value.items()
        )
    return False


def _usable(value: object) -> object:
    """``value`` if the SDK stores it as it is; else its ``str()`` (what the SDK would store)
    or :data:`_INVALID` when even that fails (a hostile or too deeply nested value)."""
    if value is not None and _plain(value):
        return value
    try:
        text = str(value)
    except Exception:  # (RecursionError included: a cycle, a deep nest)
        return _INVALID
    return _INVALID if value is None else text


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
    """A copy with every string (and string list item) bounded; truncated keys are listed.

    A value the SDK would have to convert is converted here as the SDK would (``str()``),
    and one that cannot be converted (its ``str()`` raises, a cycle, nesting deeper than
    :data:`MAX_VALUE_DEPTH`) or a key that is not a non-empty string is left out and listed
    under ``retryscope.invalid_keys``: setting the attributes then never raises.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes!r}")
    out: dict[str, AttributeValue] = {}
    truncated: list[str] = []
    invalid: list[str] = []
    for key, value in attributes.items():
        if type(key) is not str or not key:
            invalid.append(f"<{type(key).__name__} key>")
            continue
        if type(value) not in _PLAIN:
            usable = _usable(value)
            if usable is _INVALID:
                if value is not None:
                    invalid.append(key)
                continue
            value = usable  # type: ignore[assignment]
        bounded, cut = _bound_value(value, max_bytes)
        out[key] = bounded
        if cut:
            truncated.append(key)
    if truncated:
        out[TRUNCATED_KEYS_KEY] = sorted(truncated)
    if invalid:
        out[INVALID_KEYS_KEY] = sorted(invalid)
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
