"""Map what an attempt observed to an outcome family and kind.

Used when an exception escapes an attempt the caller did not classify. An exception that
carries the HTTP response it was raised for (httpx/httpx2 ``HTTPStatusError``, requests
``HTTPError``, OpenAI/Anthropic ``APIStatusError``, botocore ``ClientError``, found on the
exception or its cause) is classified by that response's status, as a send is
(:data:`~retryscope.http_rules.STATUS_RULES`): the response arrived, so
the outcome is known. Any other exception is mapped conservatively: a failure that may have
reached the provider is never called retryable here, because retrying it could repeat an
effect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.util.types import AttributeValue

from retryscope import http_rules as http_classify
from retryscope import vocabulary as v
from retryscope.vocabulary import OutcomeKind

Headers = Callable[[str], str | None]
"""Looks up a response header by its lower-case name, None when absent."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The HTTP response an exception was raised for: its status and header lookup."""

    status: int
    headers: Headers


def _lookup(headers: Any) -> Headers:
    if isinstance(headers, Mapping) and not hasattr(headers, "lower_items"):
        # a plain dict (botocore's HTTPHeaders): keys in lower case
        lowered = {str(k).lower(): val for k, val in headers.items()}
        return lambda name: _text(lowered.get(name))
    get = getattr(headers, "get", None)
    if get is None:
        return lambda name: None
    return lambda name: _text(get(name))


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _status(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def answer_of(exc: BaseException) -> Answer | None:
    """The HTTP response ``exc`` (or an error it translates,
    :func:`~retryscope.http_rules.causes`) carries, if any."""
    for seen in http_classify.causes(exc):
        response = getattr(seen, "response", None)
        if response is None:
            continue
        status = _status(getattr(response, "status_code", None))
        if status is not None:  # httpx, httpx2, requests, the OpenAI/Anthropic SDKs
            return Answer(status, _lookup(getattr(response, "headers", None)))
        if isinstance(response, Mapping):  # botocore ClientError.response
            meta = response.get("ResponseMetadata")
            if isinstance(meta, Mapping):
                status = _status(meta.get("HTTPStatusCode"))
                if status is not None:
                    return Answer(status, _lookup(meta.get("HTTPHeaders") or {}))
    return None


def classify_exception(exc: BaseException) -> OutcomeKind:
    """Best-effort kind for an unclassified exception.

    An exception carrying its HTTP response: the kind of that status (a 2xx/3xx response
    raised as an error is a protocol violation). Otherwise delegates to
    :func:`retryscope.http_rules.classify_exception` assuming the worst:
    the request may have been sent and resending is not known to be safe. So a connection
    never made (refused, a name not resolved, a failed TLS handshake, a connect timeout),
    whichever library or SDK raised it, is ``unavailable`` (retryable), while a timeout or
    any other error leaves provider acceptance unknown: indeterminate, so the retry owner
    reconciles instead of blindly resubmitting.
    """
    answer = answer_of(exc)
    if answer is not None:
        kind = http_classify.classify_status(answer.status, idempotent=False)
        return kind if kind is not None else OutcomeKind.PROTOCOL_VIOLATION
    return http_classify.classify_exception(exc, idempotent=False, request_sent=True)


def retry_after_attributes(headers: Headers) -> dict[str, AttributeValue]:
    """The Retry-After (or ``retry-after-ms``) a response carried: raw (bounded) and parsed."""
    raw_s = headers("retry-after")
    raw_ms = headers("retry-after-ms") or headers("x-amz-retry-after")  # both milliseconds
    if raw_s is None and raw_ms is None:
        return {}
    shown = raw_s if raw_s is not None else f"{raw_ms} ms"
    attrs: dict[str, AttributeValue] = {
        v.HTTP_RETRY_AFTER_RAW_KEY: shown[: http_classify.RETRY_AFTER_MAX_CHARS]
    }
    parsed = http_classify.parse_retry_after_hint(raw_s, raw_ms)
    if parsed is not None:
        attrs[v.HTTP_RETRY_AFTER_PARSED_MS_KEY] = parsed
    return attrs


def gateway_attributes(headers: Headers) -> dict[str, AttributeValue]:
    """The attempts a gateway behind the response reports it made
    (:func:`~retryscope.http_rules.gateway_attempts`), if it says."""
    attempts = http_classify.gateway_attempts(headers)
    return {} if attempts is None else {v.GATEWAY_ATTEMPTS.key: attempts}


def error_type(exc: BaseException) -> str:
    """OpenTelemetry ``error.type`` for an exception: its fully qualified class name."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
