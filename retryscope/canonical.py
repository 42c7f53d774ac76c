"""Canonical JSON and its SHA-256: the byte form of every document retryscope pins.

A retry policy, a receipt, a price table, a journal entry and a logical request's content
digest are all taken over :func:`canonical_json` (sorted keys, no insignificant whitespace,
UTF-8, plain JSON only), so the same value gives the same bytes and digest in every process,
on every machine, in the recorder, the control plane and the analytics alike.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Final

MAX_DEPTH: Final = 200
"""Deepest nesting canonical JSON accepts (deeper values are rejected, never a
``RecursionError``)."""


class CanonicalJSONError(ValueError):
    """A value cannot be written as canonical JSON (names the offending path)."""


def _check(value: Any, integers_only: bool) -> None:
    """Raise :class:`CanonicalJSONError` unless ``value`` is plain JSON (checked without
    recursion: a deep or cyclic value is rejected at :data:`MAX_DEPTH`)."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool | str | int):
            continue
        if isinstance(item, float):
            if integers_only:
                raise CanonicalJSONError(f"{path}: float {item!r} where only integers are allowed")
            if not math.isfinite(item):
                raise CanonicalJSONError(f"{path}: non-finite float {item!r}")
            continue
        if depth >= MAX_DEPTH:
            raise CanonicalJSONError(f"{path}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, list | tuple):
            stack.extend((x, f"{path}[{i}]", depth + 1) for i, x in enumerate(item))
        elif isinstance(item, dict):
            for k, x in item.items():
                if not isinstance(k, str):
                    raise CanonicalJSONError(
                        f"{path}: object key of type {type(k).__name__} is not a string"
                    )
                stack.append((x, f"{path}.{k}", depth + 1))
        else:
            raise CanonicalJSONError(f"{path}: {type(item).__name__} is not JSON-serialisable")


def canonical_json(value: Any, *, integers_only: bool = False) -> bytes:
    """UTF-8 JSON with sorted keys and no insignificant whitespace.

    The same value always gives the same bytes, across runs, processes and machines.
    ``integers_only`` rejects floats (receipts count in ms and micro-units). Anything else
    than plain JSON (bytes, NaN, non-string keys, lone surrogates, nesting deeper than
    :data:`MAX_DEPTH`, cycles) raises :class:`CanonicalJSONError`.
    """
    _check(value, integers_only)
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(f"$: a string is not valid Unicode ({exc.reason})") from None
    except (RecursionError, ValueError, TypeError) as exc:  # a str/int subclass misbehaving
        raise CanonicalJSONError(f"$: {type(exc).__name__}: {exc}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
