"""Map what an attempt observed to an outcome family and kind.

Used when an exception escapes an attempt the caller did not classify. The mapping is
deliberately conservative: a failure that may have reached the provider is never called
retryable here, because retrying it could repeat an effect.
"""

from __future__ import annotations

from retryscope.instrumentation import _http_classify as http_classify
from retryscope.vocabulary import OutcomeKind


def classify_exception(exc: BaseException) -> OutcomeKind:
    """Best-effort kind for an unclassified exception.

    Delegates to :func:`retryscope.instrumentation._http_classify.classify_exception` assuming
    the worst: the request may have been sent and resending is not known to be safe. So
    connection refusal and httpx connect errors (no request bytes accepted) are
    ``unavailable`` (retryable), while a timeout or any other error leaves provider
    acceptance unknown: indeterminate, so the retry owner reconciles instead of blindly
    resubmitting.
    """
    return http_classify.classify_exception(exc, idempotent=False, request_sent=True)


def error_type(exc: BaseException) -> str:
    """OpenTelemetry ``error.type`` for an exception: its fully qualified class name."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
