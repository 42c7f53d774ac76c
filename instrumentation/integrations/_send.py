"""One physical HTTP send recorded by a client integration (httpx, httpx2, urllib3, aiohttp).

Inside a logical request a send is a transport attempt placed by its evidence among the
operations of its parent attempt (:meth:`LogicalRequest.send`): a resend only when it
repeats an earlier send of the same operation. Outside one it is a plain HTTP client span.
The span records method, ``url.full`` with credentials and secret parameter values redacted
(:mod:`retryscope.instrumentation._redaction`, by pattern),
server address and port, the response status with its outcome kind, and the Retry-After
(or ``retry-after-ms``) header as received (bounded) and parsed. A parsed hint on a failed
send is announced to the next send under the same parent as its ``retry_after_ms`` and
sets the logical request's earliest next start (:meth:`LogicalRequest.note_retry_after`):
the next attempt at any layer records it as ``not_before``.

Nothing is written into request headers: retryscope context never leaves the process.

A send is recorded where the request goes on the wire (httpx's ``HTTPTransport``, urllib3's
``_make_request``, an aiohttp connection) and there it is final: another integration's
send inside it is the same send, and records nothing (:data:`SEND_ACTIVE`). A send recorded
above something that may send several times on its own (a client's send through a
retrying or custom transport) is opened with a ``call_layer``: a send that starts beneath
it, recorded by an integration or by a contrib instrumentation, turns it into a call whose
sends are resends by that layer (:meth:`LogicalRequest.send`); with none beneath, it stays
the send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Final, TypeVar
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.http_rules import (
    classify_exception,
    classify_status,
)
from retryscope.instrumentation._classify import (
    Headers,
    error_type,
    gateway_attributes,
    retry_after_attributes,
)
from retryscope.instrumentation._containment import note
from retryscope.instrumentation._context import Attempt, current_scope
from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._redaction import URL_MAX_CHARS, record_exception, redact_url
from retryscope.instrumentation._sends import SendEvidence
from retryscope.vocabulary import OutcomeKind

SDK_RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"
"""Header the OpenAI and Anthropic SDKs (Stainless-generated) number their tries with."""


def _int_header(value: object) -> int | None:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if isinstance(text, str) and text.strip().isdigit() and len(text) < 10:
        return int(text)
    return None


def http_evidence(method: str, url: str, body: bytes | None, header: Headers) -> SendEvidence:
    """Evidence of one HTTP send: a digest of method, URL and body (``body`` None: not in
    memory), and the SDK's own retry count when its request carries one
    (``x-stainless-retry-count``: OpenAI and Anthropic send 0, 1, 2)."""
    retry_count = _int_header(header(SDK_RETRY_COUNT_HEADER))
    return SendEvidence(
        digest=send_digest(method, url, body),
        retry_count=retry_count,
        retry_layer=v.Layer.SDK if retry_count is not None else None,
    )


SEND_ACTIVE: ContextVar[bool] = ContextVar("retryscope_send_active", default=False)
"""True while an integration records a final send in this context (an inner hook passes)."""


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What the layer that dispatched the next sends knows about them (a router's chosen
    deployment): the route they go to, its release and priority, span attributes, and the
    evidence that tells its retries from distinct calls."""

    route: str
    route_release: str | None = None
    route_priority: int = 0
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    call_key: str | None = None
    retry_count: int | None = None
    url_prefix: str | None = None
    """Only sends whose URL starts with it are this dispatch's (None: every send)."""

    def applies_to(self, url: str) -> bool:
        return self.url_prefix is None or url.startswith(self.url_prefix)


DISPATCH: ContextVar[Dispatch | None] = ContextVar("retryscope_dispatch", default=None)
"""The dispatch in force for sends made in this context (set by a router integration)."""


def outcome_kind(
    status: int | None, exc: BaseException | None, *, idempotent: bool
) -> OutcomeKind | None:
    """Failure kind of one send (None: success), by
    :data:`retryscope.http_rules.STATUS_RULES` (a redirect is a completed
    send: the client follows it with another send) or the exception."""
    if status is not None:
        return classify_status(status, idempotent=idempotent)
    if exc is not None:
        return classify_exception(exc, idempotent=idempotent, request_sent=True)
    return None


def outcome_attributes(
    status: int | None, headers: Headers | None, exc: BaseException | None, *, idempotent: bool
) -> dict[str, AttributeValue]:
    """Status, Retry-After, a gateway's reported attempts, outcome and ``error.type`` of a
    finished send."""
    attrs: dict[str, AttributeValue] = {}
    if status is not None:
        attrs[v.HTTP_STATUS_CODE.key] = status
        if headers is not None:
            attrs.update(retry_after_attributes(headers))
            attrs.update(gateway_attributes(headers))
    kind = outcome_kind(status, exc, idempotent=idempotent)
    if kind is not None:
        attrs[v.ERROR_TYPE.key] = (
            str(status) if status is not None else error_type(exc) if exc else kind.value
        )
        attrs[v.OUTCOME_KIND.key] = kind.value
    attrs[v.OUTCOME.key] = kind.family.value if kind is not None else "success"
    return attrs


def request_attributes(method: str, url: str) -> dict[str, AttributeValue]:
    """Method, redacted ``url.full``, server address and port of a request."""
    parts = urlsplit(url[: URL_MAX_CHARS * 2])
    attrs: dict[str, AttributeValue] = {
        v.HTTP_METHOD.key: method,
        v.URL_FULL_KEY: redact_url(url),
    }
    if parts.hostname:
        attrs[v.SERVER_ADDRESS_KEY] = parts.hostname
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None:
        attrs[v.SERVER_PORT_KEY] = port
    elif parts.scheme in ("http", "https"):
        attrs[v.SERVER_PORT_KEY] = 443 if parts.scheme == "https" else 80
    return attrs


class SendOptions:
    """Settings and error count shared by the sends of one integration or transport."""

    def __init__(
        self,
        *,
        route: str = "http",
        route_release: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        scope_name: str = "retryscope.http",
    ) -> None:
        self.route = route
        self.route_release = route_release
        self.tracer_provider = tracer_provider
        self.scope_name = scope_name
        self.errors = 0


class Send:
    """The span bookkeeping of one HTTP send."""

    def __init__(
        self,
        options: SendOptions,
        method: str,
        url: str,
        evidence: SendEvidence,
        call_layer: v.Layer | None = None,
    ) -> None:
        self.options = options
        self._attempt: Attempt | None = None
        self._span: trace.Span | None = None
        self.token: Token[bool] | None = None
        attrs = request_attributes(method, url)
        scope = current_scope()
        # A bound idempotency key makes resending safe: the classifier may then call a
        # request timeout a timeout before response instead of unknown acceptance.
        self._idempotent = scope is not None and scope.request.idempotency_digest is not None
        if scope is None:
            tracer = trace.get_tracer(options.scope_name, tracer_provider=options.tracer_provider)
            self._span = tracer.start_span(method, kind=SpanKind.CLIENT, attributes=attrs)
            return
        parent = scope.attempt
        route = parent.route if parent is not None else options.route
        release = parent.route_release if parent is not None else options.route_release
        priority = 0
        dispatch = DISPATCH.get()
        if dispatch is not None and dispatch.applies_to(url):
            route, priority = dispatch.route, dispatch.route_priority
            release = dispatch.route_release or release
            attrs.update(dispatch.attributes)
            evidence = _with_dispatch(evidence, dispatch)
        self._request = scope.request
        self._attempt = scope.request.send(
            route,
            evidence,
            route_release=release,
            route_priority=priority,
            attributes=attrs,
            name=method,
            call_layer=call_layer,
        ).__enter__()
        if call_layer is not None:
            scope.request.send_opened(self._attempt)

    def finish(
        self, status: int | None, headers: Headers | None, exc: BaseException | None
    ) -> None:
        attempt, span = self._attempt, self._span
        if attempt is not None:
            attrs = outcome_attributes(status, headers, exc, idempotent=self._idempotent)
            close_attempt(attempt, attrs, exc)
        elif span is not None:  # outside a logical request: a plain HTTP client span
            plain: dict[str, AttributeValue] = {}
            if status is not None:
                plain[v.HTTP_STATUS_CODE.key] = status
                if headers is not None:
                    plain.update(retry_after_attributes(headers))
            if exc is not None:
                record_exception(span, exc)
                plain[v.ERROR_TYPE.key] = error_type(exc)
            elif status is not None and status >= 400:
                plain[v.ERROR_TYPE.key] = str(status)
            span.set_attributes(plain)
            if v.ERROR_TYPE.key in plain:
                span.set_status(Status(StatusCode.ERROR))
            span.end()


def close_attempt(
    attempt: Attempt, attrs: dict[str, AttributeValue], exc: BaseException | None
) -> None:
    """Close the send ``attempt`` with its outcome attributes (``outcome_kind`` and
    ``error.type`` among them when it failed) and the exception it raised, if any."""
    kind = attrs.get(v.OUTCOME_KIND.key)
    error = attrs.get(v.ERROR_TYPE.key)
    attempt.set_attributes(attrs)
    attempt.set_outcome(
        str(kind) if kind is not None else "success",
        error=str(error) if error is not None else None,
    )
    hint = attrs.get(v.HTTP_RETRY_AFTER_PARSED_MS_KEY)
    attempt.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
    if isinstance(hint, int) and kind is not None:
        request = attempt.request
        # The next send under the same parent records the hint this one received, and
        # no attempt at any layer should start before it has passed.
        request.schedule_backoff(retry_after_ms=hint)
        request.note_retry_after(hint, at=attempt.ended_at)


def _with_dispatch(evidence: SendEvidence, dispatch: Dispatch) -> SendEvidence:
    """The send's evidence with the dispatching layer's: its call key groups its tries; an
    SDK's own retry count beneath it still says whose retry a resend is."""
    if dispatch.call_key is None:
        return evidence
    sdk_retry = evidence.retry_count is not None and evidence.retry_count > 0
    return SendEvidence(
        digest=evidence.digest,
        retry_count=evidence.retry_count if sdk_retry else dispatch.retry_count,
        call_key=dispatch.call_key,
        retry_layer=evidence.retry_layer if sdk_retry else v.Layer.ADAPTER,
    )


def start_send(
    options: SendOptions,
    method: str,
    url: str,
    evidence: SendEvidence,
    *,
    call_layer: v.Layer | None = None,
) -> Send | None:
    """A :class:`Send` for the request about to go out, or None when another integration
    already records this send, instrumentation is suppressed (an exporter's own requests:
    the SDK's processors export so) or bookkeeping failed (the request still goes out).

    ``call_layer``: the send goes through something that may send on its own (see the
    module docstring); None: the send is final."""
    if SEND_ACTIVE.get() or not is_instrumentation_enabled():
        return None
    try:
        send = Send(options, method, url, evidence, call_layer)
    except Exception as exc:  # instrumentation must never stop the request from being sent
        options.errors += 1
        note(f"{options.scope_name}: open a send", exc)
        return None
    if call_layer is None:
        send.token = SEND_ACTIVE.set(True)
    return send


def finish_send(
    send: Send | None, status: int | None, headers: Headers | None, exc: BaseException | None
) -> None:
    """Close ``send`` (if any) with what came back; contained like :func:`start_send`."""
    if send is None:
        return
    try:
        send.finish(status, headers, exc)
    except Exception as exc:
        send.options.errors += 1
        note(f"{send.options.scope_name}: close a send", exc)
    finally:
        if send.token is not None:
            try:
                SEND_ACTIVE.reset(send.token)
            except ValueError:  # finished in another context than it started in
                SEND_ACTIVE.set(False)


R = TypeVar("R")
Answered = Callable[[R], tuple[int, Headers]]
"""The status and header lookup of a client's response."""


def through(send: Send | None, call: Callable[[], R], answered: Answered[R]) -> R:
    """Run ``call`` (the send itself) and close ``send`` with its response or error."""
    if send is None:
        return call()
    try:
        response = call()
    except BaseException as exc:
        finish_send(send, None, None, exc)
        raise
    status, headers = answered(response)
    finish_send(send, status, headers, None)
    return response


async def athrough(send: Send | None, call: Callable[[], Awaitable[R]], answered: Answered[R]) -> R:
    """The coroutine twin of :func:`through`."""
    if send is None:
        return await call()
    try:
        response = await call()
    except BaseException as exc:
        finish_send(send, None, None, exc)
        raise
    status, headers = answered(response)
    finish_send(send, status, headers, None)
    return response
