"""Map what an attempt observed to an outcome family and kind.

Used when an exception escapes an attempt the caller did not classify. The mapping is
deliberately conservative: a failure that may have reached the provider is never called
retryable here, because retrying it could repeat an effect.
"""

from __future__ import annotations

import sys

from retryscope.vocabulary import Outcome, OutcomeKind


def outcome_of(kind: OutcomeKind | str) -> Outcome:
    """The family a failure kind belongs to."""
    return OutcomeKind(kind).family


def classify_exception(exc: BaseException) -> OutcomeKind:
    """Best-effort kind for an unclassified exception.

    Connection refusal means no request bytes were accepted: ``unavailable`` (retryable);
    so does httpx's ``ConnectError``, and its connect/pool timeouts are
    ``timeout_before_response`` (nothing was sent). A read/write timeout or any other error
    leaves provider acceptance unknown: indeterminate, so the retry owner reconciles instead
    of blindly resubmitting. httpx is only consulted when the application imported it.
    """
    if isinstance(exc, ConnectionRefusedError):
        return OutcomeKind.UNAVAILABLE
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            return OutcomeKind.TIMEOUT_BEFORE_RESPONSE
        if isinstance(exc, httpx.ConnectError):
            return OutcomeKind.UNAVAILABLE
    return OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE


def error_type(exc: BaseException) -> str:
    """OpenTelemetry ``error.type`` for an exception: its fully qualified class name."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
