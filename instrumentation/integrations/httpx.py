"""An httpx transport that makes every HTTP send a visible transport attempt.

Wrap the transport of any ``httpx.Client``/``AsyncClient`` (an SDK's internal client too)::

    client = httpx.Client(transport=RetryscopeTransport())
    async_client = httpx.AsyncClient(transport=AsyncRetryscopeTransport())

Each request the transport sends gets one CLIENT span. Inside a logical request it is a
transport attempt (layer ``transport``, its own ordinal, its parent attempt, the route of
the enclosing attempt) with ``http.request.resend_count`` from the second send under the
same parent on, so retries an SDK makes internally appear one by one under the harness
attempt that caused them. Outside a logical request it is a plain HTTP client span. The
span records method, ``url.full`` with credentials and secret parameter values redacted
(:mod:`retryscope.instrumentation._redaction`: any key naming a token, key, secret, password,
signature or auth, after ``&`` or ``;``), server
address and port, the response status with its outcome kind, and the Retry-After (or
``retry-after-ms``) header as received (bounded) and parsed; the parsed hint is also
announced to the next send under the same parent as its ``retry_after_ms``. Statuses,
transport errors and Retry-After are classified and parsed by the control plane's
:mod:`retryscope.instrumentation._http_classify` (one set of rules for both).

It needs no contrib instrumentation, and it writes nothing into request headers: retryscope
context never leaves the process this way (use :func:`retryscope.inject` on purpose).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Final

import httpx
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation._classify import error_type
from retryscope.instrumentation._containment import note
from retryscope.instrumentation._context import Attempt, current_scope
from retryscope.instrumentation._http_classify import (
    classify_exception,
    classify_status,
    parse_retry_after,
)
from retryscope.instrumentation._redaction import record_exception, redact_url
from retryscope.vocabulary import Layer, OutcomeKind

_log = logging.getLogger(__name__)

RETRY_AFTER_MAX_CHARS: Final = 64
"""Longest Retry-After value kept or parsed; longer values are untrusted noise."""
RETRY_AFTER_MAX_MS: Final = 24 * 3600 * 1000
"""Parsed hints are clamped to one day."""


def _retry_after_ms_header(value: str | None) -> int | None:
    """``retry-after-ms`` (OpenAI, Anthropic): ASCII digits only, bounded like Retry-After."""
    if value is None:
        return None
    text = value.strip(" \t")
    if not text or len(text) > 12 or not (text.isascii() and text.isdigit()):
        return None
    return min(int(text), RETRY_AFTER_MAX_MS)


def parse_retry_after_hint(
    retry_after: str | None,
    retry_after_ms: str | None = None,
    *,
    now_ms: int | None = None,
) -> int | None:
    """The server's delay hint in ms: ``retry-after-ms`` when valid, else ``Retry-After``
    parsed strictly (RFC 9110, :func:`http_classify.parse_retry_after`), capped at a day."""
    from_ms = _retry_after_ms_header(retry_after_ms)
    if from_ms is not None:
        return from_ms
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return parse_retry_after(retry_after, now_ms=now, cap_ms=RETRY_AFTER_MAX_MS).delay_ms


def send_outcome_kind(
    response: httpx.Response | None, exc: BaseException | None, *, idempotent: bool
) -> OutcomeKind | None:
    """Failure kind of one send (None: success), by
    :data:`retryscope.instrumentation._http_classify.STATUS_RULES` (a redirect is a completed
    send: httpx follows it with another send) or the exception."""
    if response is not None:
        return classify_status(response.status_code, idempotent=idempotent)
    if exc is not None:
        return classify_exception(exc, idempotent=idempotent, request_sent=True)
    return None


def _request_attributes(request: httpx.Request) -> dict[str, AttributeValue]:
    url = request.url
    attrs: dict[str, AttributeValue] = {
        v.HTTP_METHOD.key: request.method,
        v.URL_FULL_KEY: redact_url(str(url)),
        v.SERVER_ADDRESS_KEY: url.host,
    }
    if url.port is not None:
        attrs[v.SERVER_PORT_KEY] = url.port
    elif url.scheme in ("http", "https"):
        attrs[v.SERVER_PORT_KEY] = 443 if url.scheme == "https" else 80
    return attrs


def _response_attributes(response: httpx.Response) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {v.HTTP_STATUS_CODE.key: response.status_code}
    raw_s = response.headers.get("retry-after")
    raw_ms = response.headers.get("retry-after-ms")
    if raw_s is not None or raw_ms is not None:
        shown = raw_s if raw_s is not None else f"{raw_ms} ms"
        attrs[v.HTTP_RETRY_AFTER_RAW_KEY] = shown[:RETRY_AFTER_MAX_CHARS]
        parsed = parse_retry_after_hint(raw_s, raw_ms)
        if parsed is not None:
            attrs[v.HTTP_RETRY_AFTER_PARSED_MS_KEY] = parsed
    return attrs


def _is_classified_send(span: trace.Span, request_id: str) -> bool:
    attrs = getattr(span, "attributes", None)  # SDK spans expose their attributes
    return (
        isinstance(attrs, Mapping)
        and attrs.get(v.LAYER.key) == Layer.TRANSPORT.value
        and attrs.get(v.LOGICAL_REQUEST_ID.key) == request_id
        and span.is_recording()
    )


def _outcome_attributes(
    response: httpx.Response | None, exc: BaseException | None, *, idempotent: bool
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {}
    if response is not None:
        attrs.update(_response_attributes(response))
    kind = send_outcome_kind(response, exc, idempotent=idempotent)
    if kind is not None:
        attrs[v.ERROR_TYPE.key] = (
            str(response.status_code)
            if response is not None
            else error_type(exc)
            if exc is not None
            else kind.value
        )
        attrs[v.OUTCOME_KIND.key] = kind.value
    attrs[v.OUTCOME.key] = kind.family.value if kind is not None else "success"
    return attrs


class _Send:
    """The span bookkeeping of one HTTP send (shared by the sync and async transports)."""

    def __init__(self, owner: _Options, request: httpx.Request) -> None:
        self.options = owner
        self._attempt: Attempt | None = None
        self._span: trace.Span | None = None
        self._adopted: trace.Span | None = None
        attrs = _request_attributes(request)
        scope = current_scope()
        # A bound idempotency key makes resending safe: the classifier may then call a
        # request timeout a timeout before response instead of unknown acceptance.
        self._idempotent = scope is not None and scope.request.idempotency_digest is not None
        name = request.method
        current = trace.get_current_span()
        if scope is not None and _is_classified_send(current, scope.request.id):
            # A contrib HTTP span wrapping this transport is already this send's transport
            # attempt (the processor classified it): complete it instead of adding a second.
            self._adopted = current
            current.set_attributes(attrs)
        elif scope is not None:
            parent = scope.attempt
            route = parent.route if parent is not None else owner.route
            release = parent.route_release if parent is not None else owner.route_release
            attempt = scope.request.attempt(
                route,
                route_release=release,
                layer=Layer.TRANSPORT,
                attributes=attrs,
                name=name,
            )
            self._attempt = attempt.__enter__()
        else:
            tracer = trace.get_tracer("retryscope.httpx", tracer_provider=owner.tracer_provider)
            self._span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)

    def finish(self, response: httpx.Response | None, exc: BaseException | None) -> None:
        attempt, span, adopted = self._attempt, self._span, self._adopted
        if adopted is not None:
            adopted.set_attributes(_outcome_attributes(response, exc, idempotent=self._idempotent))
        elif attempt is not None:
            self._close_attempt(attempt, response, exc)
        elif span is not None:
            if response is not None:
                span.set_attributes(_response_attributes(response))
                if response.status_code >= 400:
                    span.set_attribute(v.ERROR_TYPE.key, str(response.status_code))
                    span.set_status(Status(StatusCode.ERROR))
            elif exc is not None:
                record_exception(span, exc)
                span.set_attribute(v.ERROR_TYPE.key, error_type(exc))
                span.set_status(Status(StatusCode.ERROR))
            span.end()

    def _close_attempt(
        self, attempt: Attempt, response: httpx.Response | None, exc: BaseException | None
    ) -> None:
        attrs = _outcome_attributes(response, exc, idempotent=self._idempotent)
        kind = attrs.get(v.OUTCOME_KIND.key)
        error = attrs.get(v.ERROR_TYPE.key)
        attempt.set_attributes(attrs)
        attempt.set_outcome(
            str(kind) if kind is not None else "success",
            error=str(error) if error is not None else None,
        )
        hint = attrs.get(v.HTTP_RETRY_AFTER_PARSED_MS_KEY)
        attempt.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        if isinstance(hint, int):
            # The next send under the same parent records the hint this one received.
            attempt.request.schedule_backoff(retry_after_ms=hint)


def _start(options: _Options, request: httpx.Request) -> _Send | None:
    try:
        return _Send(options, request)
    except Exception as exc:  # instrumentation must never stop the request from being sent
        options.errors += 1
        note("RetryscopeTransport: open a send", exc)
        return None


def _finish(send: _Send | None, response: httpx.Response | None, exc: BaseException | None) -> None:
    if send is None:
        return
    try:
        send.finish(response, exc)
    except Exception as failed:
        send.options.errors += 1
        note("RetryscopeTransport: close a send", failed)


class _Options:
    """Settings and error count shared by the sync and async transports."""

    def __init__(
        self,
        *,
        route: str = "http",
        route_release: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.route = route
        self.route_release = route_release
        self.tracer_provider = tracer_provider
        self.errors = 0


class _Counted:
    _options: _Options

    @property
    def errors(self) -> int:
        """Sends whose span bookkeeping failed (contained: the request still went out)."""
        return self._options.errors


class RetryscopeTransport(_Counted, httpx.BaseTransport):
    """Wraps a sync httpx transport (default ``httpx.HTTPTransport()``); one span per send.

    ``route``/``route_release`` name the destination when the send is not inside an
    attempt (inside one, the attempt's route is used); ``tracer_provider`` is used for
    sends outside a logical request.
    """

    def __init__(self, wrapped: httpx.BaseTransport | None = None, **options: Any) -> None:
        self.wrapped = wrapped if wrapped is not None else httpx.HTTPTransport()
        self._options = _Options(**options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        send = _start(self._options, request)
        try:
            response = self.wrapped.handle_request(request)
        except BaseException as exc:
            _finish(send, None, exc)
            raise
        _finish(send, response, None)
        return response

    def close(self) -> None:
        self.wrapped.close()


class AsyncRetryscopeTransport(_Counted, httpx.AsyncBaseTransport):
    """The asyncio twin of :class:`RetryscopeTransport` (same options)."""

    def __init__(self, wrapped: httpx.AsyncBaseTransport | None = None, **options: Any) -> None:
        self.wrapped = wrapped if wrapped is not None else httpx.AsyncHTTPTransport()
        self._options = _Options(**options)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        send = _start(self._options, request)
        try:
            response = await self.wrapped.handle_async_request(request)
        except BaseException as exc:
            _finish(send, None, exc)
            raise
        _finish(send, response, None)
        return response

    async def aclose(self) -> None:
        await self.wrapped.aclose()
