"""The digests that stand in for sensitive values.

Raw idempotency keys and request payloads never leave the process: spans, logs and files
carry only these digests. Digests are domain-separated (a fixed label per kind) and
length-prefixed, so a digest of one kind can never collide with another kind's by
construction, and ``("ab", "c")`` never digests like ``("a", "bc")``.

Two families:

* the **telemetry digests** (:func:`idempotency_digest`, :func:`request_digest`), written on
  spans. An unkeyed SHA-256 of a guessable key (``order-42``) is recovered by trying
  ``order-0 … order-99999``, so with a deployment key — ``RETRYSCOPE_DIGEST_KEY`` (the key
  text) or ``RETRYSCOPE_DIGEST_KEY_FILE`` (a file holding it), at least
  :data:`MIN_KEY_BYTES` bytes, the same on every process of a fleet so digests still join —
  they are HMAC-SHA-256 under that key, and the key's id (:func:`digest_key_id`, a
  fingerprint that does not reveal the key) is recorded with the data. Without a key they
  are the unkeyed SHA-256 below and a one-time warning is logged; the audit report says the
  data set's digests are unkeyed.
* the **content digests** (:func:`idempotency_sha256`, :func:`request_sha256`): plain
  SHA-256 (:mod:`retryscope.canonical`), the same everywhere, for values that documents pin
  (a retry policy binds its request and idempotency key by them; receipts, price tables).
  They never depend on a deployment key, so a policy file stays verifiable anywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from retryscope._fork import reset_in_child
from retryscope.canonical import canonical_json, sha256_hex

_log = logging.getLogger(__name__)

_IDEMPOTENCY_DOMAIN: Final = b"retryscope/idempotency-key/v1"
_REQUEST_DOMAIN: Final = b"retryscope/logical-request/v1"
_KEY_ID_DOMAIN: Final = b"retryscope/digest-key-id/v1"
_SEND_DOMAIN: Final = b"retryscope/http-send/v1"

DIGEST_KEY_ENV: Final = "RETRYSCOPE_DIGEST_KEY"
DIGEST_KEY_FILE_ENV: Final = "RETRYSCOPE_DIGEST_KEY_FILE"
MIN_KEY_BYTES: Final = 16
"""Shortest deployment key accepted (e.g. ``python -c 'import secrets;
print(secrets.token_hex(32))'`` makes a good one)."""


class DigestKeyError(ValueError):
    """The deployment key's configuration is malformed (names the variable and problem)."""


def _framed(domain: bytes, *parts: str) -> bytes:
    out = bytearray(domain)
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        out += len(raw).to_bytes(8, "big")
        out += raw
    return bytes(out)


def _idempotency_message(tenant: str, operation: str, key: str) -> bytes:
    for name, value in (("tenant", tenant), ("operation", operation), ("idempotency key", key)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return _framed(_IDEMPOTENCY_DOMAIN, tenant, operation, key)


def _request_message(request: Any) -> bytes:
    return _REQUEST_DOMAIN + b"\x00" + canonical_json(request)


# -- content digests: plain SHA-256, never keyed ----------------------------------------------
def idempotency_sha256(tenant: str, operation: str, key: str) -> str:
    """SHA-256 of an idempotency key scoped to its tenant and operation (what a policy pins)."""
    return sha256_hex(_idempotency_message(tenant, operation, key))


def request_sha256(request: Any) -> str:
    """SHA-256 of a logical request payload via its canonical JSON (what a policy pins)."""
    return sha256_hex(_request_message(request))


# -- the deployment key ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DigestKey:
    """A deployment key: its secret (never shown) and its id (recorded with the data)."""

    secret: bytes = field(repr=False)
    key_id: str = field(init=False)

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_KEY_BYTES:
            raise DigestKeyError(
                f"a digest key needs at least {MIN_KEY_BYTES} bytes, got {len(self.secret)}"
            )
        object.__setattr__(self, "key_id", sha256_hex(_KEY_ID_DOMAIN + self.secret)[:16])

    def digest(self, message: bytes) -> str:
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


def load_digest_key(environ: Mapping[str, str] | None = None) -> DigestKey | None:
    """The deployment key ``environ`` (default ``os.environ``) configures, or None.

    ``RETRYSCOPE_DIGEST_KEY`` holds the key text, ``RETRYSCOPE_DIGEST_KEY_FILE`` the path of
    a file holding it (surrounding whitespace is ignored either way). Both set, an unreadable
    file or a key shorter than :data:`MIN_KEY_BYTES` raise :class:`DigestKeyError`.
    """
    env = os.environ if environ is None else environ
    text = env.get(DIGEST_KEY_ENV, "").strip()
    path = env.get(DIGEST_KEY_FILE_ENV, "").strip()
    if text and path:
        raise DigestKeyError(f"set {DIGEST_KEY_ENV} or {DIGEST_KEY_FILE_ENV}, not both")
    if path:
        try:
            raw = Path(path).read_bytes().strip()
        except OSError as exc:
            raise DigestKeyError(f"{DIGEST_KEY_FILE_ENV}={path!r}: {exc.strerror or exc}") from None
        where = DIGEST_KEY_FILE_ENV
    elif text:
        raw, where = text.encode("utf-8", "surrogatepass"), DIGEST_KEY_ENV
    else:
        return None
    try:
        return DigestKey(raw)
    except DigestKeyError as exc:
        raise DigestKeyError(f"{where}: {exc}") from None


class _KeyState:
    """The process's deployment key, read from the environment once (on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = False
        self._key: DigestKey | None = None
        reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork

    def get(self) -> DigestKey | None:
        if self._loaded:
            return self._key
        with self._lock:
            if not self._loaded:
                self._key = self._load()
                self._loaded = True
        return self._key

    def reload(self) -> DigestKey | None:
        with self._lock:
            self._loaded = False
        return self.get()

    @staticmethod
    def _load() -> DigestKey | None:
        try:
            key = load_digest_key()
        except DigestKeyError as exc:
            _log.error("retryscope: %s; digests are unkeyed", exc)
            return None
        if key is None:
            _log.warning(
                "retryscope: no digest key (%s or %s): idempotency and request digests are "
                "unkeyed SHA-256, and a guessable idempotency key can be recovered from its "
                "digest; set the same key on every process whose data is analysed together",
                DIGEST_KEY_ENV,
                DIGEST_KEY_FILE_ENV,
            )
        return key


_state: Final = _KeyState()


def digest_key_id() -> str | None:
    """Id of the deployment key the telemetry digests are keyed with (None: unkeyed)."""
    key = _state.get()
    return key.key_id if key is not None else None


def reload_digest_key() -> str | None:
    """Read the deployment key from the environment again (after it changed); its id."""
    key = _state.reload()
    return key.key_id if key is not None else None


# -- telemetry digests: keyed when the deployment has a key --------------------------------
def idempotency_digest(tenant: str, operation: str, key: str) -> str:
    """Digest of an idempotency key, scoped to its tenant and operation, as spans carry it:
    HMAC-SHA-256 under the deployment key, or :func:`idempotency_sha256` without one."""
    message = _idempotency_message(tenant, operation, key)
    deployment = _state.get()
    return deployment.digest(message) if deployment is not None else sha256_hex(message)


def request_digest(request: Any) -> str:
    """Digest of a logical request payload via its canonical JSON, as spans carry it:
    HMAC-SHA-256 under the deployment key, or :func:`request_sha256` without one."""
    message = _request_message(request)
    deployment = _state.get()
    return deployment.digest(message) if deployment is not None else sha256_hex(message)


def send_digest(method: str, url: str, body: bytes | None) -> str:
    """Digest of one HTTP request (method, URL and body) telling a resend of the same request
    from a distinct call; computed in process and never written anywhere (a body digest of a
    short prompt could be guessed)."""
    framed = _framed(_SEND_DOMAIN, method.upper(), url)
    return hashlib.sha256(framed + (b"\x01" + body if body is not None else b"\x00")).hexdigest()
