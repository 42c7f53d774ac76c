"""Canonical JSON and the SHA-256 digests that stand in for sensitive values.

Raw idempotency keys and request payloads never leave the process: spans, logs and files
carry only these digests. Digests are domain-separated (a fixed label per kind) and
length-prefixed, so a digest of one kind can never collide with another kind's by
construction, and ``("ab", "c")`` never digests like ``("a", "bc")``.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

_IDEMPOTENCY_DOMAIN = b"retryscope/idempotency-key/v1"
_REQUEST_DOMAIN = b"retryscope/logical-request/v1"
_SEND_DOMAIN = b"retryscope/http-send/v1"


class CanonicalJSONError(ValueError):
    """A value cannot be written as canonical JSON (names the offending path)."""


def _check(value: Any, path: str, integers_only: bool) -> None:
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if integers_only:
            raise CanonicalJSONError(f"{path}: float {value!r} where only integers are allowed")
        if not math.isfinite(value):
            raise CanonicalJSONError(f"{path}: non-finite float {value!r}")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", integers_only)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise CanonicalJSONError(f"{path}: object key {k!r} is not a string")
            _check(item, f"{path}.{k}", integers_only)
        return
    raise CanonicalJSONError(f"{path}: {type(value).__name__} is not JSON-serialisable")


def canonical_json(value: Any, *, integers_only: bool = False) -> bytes:
    """UTF-8 JSON with sorted keys and no insignificant whitespace.

    The same value always gives the same bytes, across runs, processes and machines.
    ``integers_only`` rejects floats (receipts count in ms and micro-units).
    """
    _check(value, "$", integers_only)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _framed(domain: bytes, *parts: str) -> bytes:
    out = bytearray(domain)
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        out += len(raw).to_bytes(8, "big")
        out += raw
    return bytes(out)


def idempotency_digest(tenant: str, operation: str, key: str) -> str:
    """Digest of an idempotency key, scoped to its tenant and operation."""
    return sha256_hex(_framed(_IDEMPOTENCY_DOMAIN, tenant, operation, key))


def request_digest(request: Any) -> str:
    """Digest of a logical request payload via its canonical JSON."""
    return sha256_hex(_REQUEST_DOMAIN + b"\x00" + canonical_json(request))


def send_digest(method: str, url: str, body: bytes | None) -> str:
    """Digest of one HTTP request (method, URL and body) telling a resend of the same request
    from a distinct call; computed in process and never written anywhere (a body digest of a
    short prompt could be guessed)."""
    framed = _framed(_SEND_DOMAIN, method.upper(), url)
    return hashlib.sha256(framed + (b"\x01" + body if body is not None else b"\x00")).hexdigest()
