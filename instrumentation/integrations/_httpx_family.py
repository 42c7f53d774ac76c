"""Sends of httpx and httpx2 clients: one transport wrapper for both libraries, and the
client patch :class:`~retryscope.instrumentation.RetryscopeInstrumentor` installs.

httpx2 (what the OpenAI 3.x and Anthropic 2.x SDKs send through) has the same API as httpx
but its own classes: a transport, request or stream of one library inside a client of the
other fails on the client's ``isinstance`` asserts, and the Anthropic SDK rejects any
object with an ``httpx`` class in its MRO. So the wrappers here subclass neither library's
``BaseTransport`` (the public classes of :mod:`.httpx` and :mod:`.httpx2` add their own
library's, so a wrapping transport that requires one takes them), never build a request,
response or stream (they return what the inner transport returned), read requests and
responses only through the attributes both share, and create their default inner transport
from the library of the first request they see.

The client patch records each send where it goes on the wire,
``HTTPTransport.handle_request`` / ``AsyncHTTPTransport.handle_async_request`` of a library:
a retrying transport wrapped around it (httpx-retries' ``RetryTransport``) sends there once
per try. ``Client._send_single_request`` / ``AsyncClient._send_single_request`` is where
every send of every client passes, whatever its transport (mounts, proxies, LiteLLM's
aiohttp transport), below redirects and auth round-trips: there a send through any other
transport is recorded too, as a send that turns into a call when sends start beneath it
(layer ``transport``: whatever the transport sent more than once, it retried). The contrib
``HTTPXClientInstrumentor``/``HTTPX2ClientInstrumentor`` spans wrap the same
``HTTPTransport`` methods: inside a send recorded there they are that send seen twice and
are only stamped; beneath a send that may be a call they are its sends.
``httpx.HTTPTransport(retries=N)`` retries only the connection (httpcore's
``HTTPConnection._connect``, on ``ConnectError``/``ConnectTimeout``): no request byte is
sent before it connects, so it is one send.

Evidence per send: a digest of method, URL and body (when the body is in memory), and the
SDK's own retry count from ``x-stainless-retry-count`` (OpenAI and Anthropic send 0, 1, 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final, Self

from retryscope.instrumentation._classify import Headers
from retryscope.instrumentation._sends import SendEvidence
from retryscope.instrumentation.integrations._send import (
    SendOptions,
    athrough,
    http_evidence,
    start_send,
    through,
)
from retryscope.vocabulary import Layer

LIBRARIES: Final = ("httpx", "httpx2")


def request_evidence(request: Any) -> tuple[str, str, SendEvidence]:
    """Method, URL and evidence of an httpx/httpx2 request (read, never modified)."""
    method = str(request.method)
    url = str(request.url)
    try:
        body: bytes | None = bytes(request.content)
    except Exception:  # a streamed body is not in memory: no digest of it
        body = None
    return method, url, http_evidence(method, url, body, request.headers.get)


def _answered(response: Any) -> tuple[int, Headers]:
    return int(response.status_code), response.headers.get


def _default_transport(request: Any, *, asynchronous: bool) -> Any:
    """A default transport of the library ``request`` belongs to (httpx or httpx2)."""
    library = type(request).__module__.partition(".")[0]
    if library not in LIBRARIES:
        raise TypeError(f"not an httpx or httpx2 request: {type(request)!r}")
    module = importlib.import_module(library)
    return module.AsyncHTTPTransport() if asynchronous else module.HTTPTransport()


def _on_the_wire(transport: Any) -> bool:
    """Whether ``transport`` puts the request on the wire itself: a library's own
    ``HTTPTransport``/``AsyncHTTPTransport`` (exactly: a subclass may send otherwise)."""
    cls = type(transport)
    return cls.__name__ in _WIRE_NAMES and cls.__module__.partition(".")[0] in LIBRARIES


def _call_layer(transport: Any) -> Layer | None:
    """None when a send through ``transport`` is final; else the layer whose retries the
    sends beneath it are (it may send several times on its own)."""
    return None if _on_the_wire(transport) else Layer.TRANSPORT


class _Counted:
    _options: SendOptions

    @property
    def errors(self) -> int:
        """Sends whose span bookkeeping failed (contained: the request still went out)."""
        return self._options.errors


class RetryscopeTransport(_Counted):
    """A sync transport for ``httpx.Client`` and ``httpx2.Client``: one span per send.

    ``wrapped`` is the transport that sends (of the client's library; default: that
    library's ``HTTPTransport()``, made on the first request); through any other
    transport (a retrying one), a send recorded beneath it (by the instrumentor or a
    contrib instrumentation) turns this one into a call. ``route``/``route_release`` name
    the destination of sends outside an attempt; ``tracer_provider`` is used for sends
    outside a logical request.
    """

    def __init__(self, wrapped: Any = None, **options: Any) -> None:
        self.wrapped = wrapped
        self._options = SendOptions(scope_name="retryscope.httpx", **options)

    def handle_request(self, request: Any) -> Any:
        inner = self.wrapped
        if inner is None:
            inner = self.wrapped = _default_transport(request, asynchronous=False)
        send = start_send(self._options, *request_evidence(request), call_layer=_call_layer(inner))
        return through(send, lambda: inner.handle_request(request), _answered)

    def close(self) -> None:
        if self.wrapped is not None:
            self.wrapped.close()

    def __enter__(self) -> Self:
        if self.wrapped is not None:
            self.wrapped.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        if self.wrapped is not None:
            self.wrapped.__exit__(exc_type, exc, tb)


class AsyncRetryscopeTransport(_Counted):
    """The asyncio twin of :class:`RetryscopeTransport` (``httpx.AsyncClient`` and
    ``httpx2.AsyncClient``; same options)."""

    def __init__(self, wrapped: Any = None, **options: Any) -> None:
        self.wrapped = wrapped
        self._options = SendOptions(scope_name="retryscope.httpx", **options)

    async def handle_async_request(self, request: Any) -> Any:
        inner = self.wrapped
        if inner is None:
            inner = self.wrapped = _default_transport(request, asynchronous=True)
        send = start_send(self._options, *request_evidence(request), call_layer=_call_layer(inner))
        return await athrough(send, lambda: inner.handle_async_request(request), _answered)

    async def aclose(self) -> None:
        if self.wrapped is not None:
            await self.wrapped.aclose()

    async def __aenter__(self) -> Self:
        if self.wrapped is not None:
            await self.wrapped.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        if self.wrapped is not None:
            await self.wrapped.__aexit__(exc_type, exc, tb)


# --- the client patch -----------------------------------------------------------------------
CLIENT_OPTIONS: Final = SendOptions(scope_name="retryscope.httpx")
"""Options of the sends the client patch records (its error count)."""

_CLIENTS: Final = (("Client", "_send_single_request"), ("AsyncClient", "_send_single_request"))
_WIRE: Final = (("HTTPTransport", "handle_request"), ("AsyncHTTPTransport", "handle_async_request"))
_WIRE_NAMES: Final = frozenset(cls for cls, _ in _WIRE)


def _records_itself(transport: Any) -> bool:
    """Whether the sends through ``transport`` are recorded beneath the client: on the
    wire (patched with the client) or by a :class:`RetryscopeTransport`."""
    return isinstance(transport, RetryscopeTransport | AsyncRetryscopeTransport) or _on_the_wire(
        transport
    )


def _client_send_layer(client: Any, request: Any) -> Layer | None:
    """None when the send ``client`` is about to make is recorded beneath it; else the
    call layer of the send recorded at the client."""
    try:
        transport = client._transport_for_url(request.url)
    except Exception:  # a client without it: recorded here, as a send that may be a call
        return Layer.TRANSPORT
    return None if _records_itself(transport) else Layer.TRANSPORT


def _sync_send(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    request = args[0] if args else kwargs["request"]
    layer = _client_send_layer(instance, request)
    if layer is None:
        return wrapped(*args, **kwargs)
    send = start_send(CLIENT_OPTIONS, *request_evidence(request), call_layer=layer)
    return through(send, lambda: wrapped(*args, **kwargs), _answered)


async def _async_send(
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    request = args[0] if args else kwargs["request"]
    layer = _client_send_layer(instance, request)
    if layer is None:
        return await wrapped(*args, **kwargs)
    send = start_send(CLIENT_OPTIONS, *request_evidence(request), call_layer=layer)
    return await athrough(send, lambda: wrapped(*args, **kwargs), _answered)


def _wire_send(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    request = args[0] if args else kwargs["request"]
    send = start_send(CLIENT_OPTIONS, *request_evidence(request))
    return through(send, lambda: wrapped(*args, **kwargs), _answered)


async def _async_wire_send(
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    request = args[0] if args else kwargs["request"]
    send = start_send(CLIENT_OPTIONS, *request_evidence(request))
    return await athrough(send, lambda: wrapped(*args, **kwargs), _answered)


_HOOKS: Final = (
    (_CLIENTS[0], _sync_send),
    (_CLIENTS[1], _async_send),
    (_WIRE[0], _wire_send),
    (_WIRE[1], _async_wire_send),
)


def patch_clients(library: str) -> None:
    """Record every send of every client of ``library`` (``httpx`` or ``httpx2``)."""
    from wrapt import wrap_function_wrapper

    for (cls, method), hook in _HOOKS:
        wrap_function_wrapper(library, f"{cls}.{method}", hook)


def unpatch_clients(library: str) -> None:
    """Undo :func:`patch_clients`."""
    from opentelemetry.instrumentation.utils import unwrap

    module = importlib.import_module(library)
    for (cls, method), _ in _HOOKS:
        unwrap(getattr(module, cls), method)
