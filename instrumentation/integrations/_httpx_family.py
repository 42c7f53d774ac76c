"""Sends of httpx and httpx2 clients: one transport wrapper for both libraries, and the
client patch :class:`~retryscope.instrumentation.RetryscopeInstrumentor` installs.

httpx2 (what the OpenAI 3.x and Anthropic 2.x SDKs send through) has the same API as httpx
but its own classes: a transport, request or stream of one library inside a client of the
other fails on the client's ``isinstance`` asserts, and the Anthropic SDK rejects any
object with an ``httpx`` class in its MRO. So the wrapper subclasses neither library's
``BaseTransport``, never builds a request, response or stream (it returns what the inner
transport returned), reads requests and responses only through the attributes both share,
and creates its default inner transport from the library of the first request it sees.

The client patch wraps ``Client._send_single_request`` / ``AsyncClient._send_single_request``
of a library: the one place every send of every client passes through, whatever its
transport (mounts, proxies, LiteLLM's aiohttp transport), below redirects and auth
round-trips and above the contrib ``HTTPXClientInstrumentor``/``HTTPX2ClientInstrumentor``
spans (which then are the same send seen twice and are only stamped).

Evidence per send: a digest of method, URL and body (when the body is in memory), and the
SDK's own retry count from ``x-stainless-retry-count`` (OpenAI and Anthropic send 0, 1, 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final

from retryscope.instrumentation._classify import Headers
from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._sends import SendEvidence
from retryscope.instrumentation.integrations._send import (
    SendOptions,
    athrough,
    start_send,
    through,
)
from retryscope.vocabulary import Layer

SDK_RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"
"""Header the OpenAI and Anthropic SDKs (Stainless-generated) number their tries with."""
LIBRARIES: Final = ("httpx", "httpx2")


def _int_header(value: object) -> int | None:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if isinstance(text, str) and text.strip().isdigit() and len(text) < 10:
        return int(text)
    return None


def request_evidence(request: Any) -> tuple[str, str, SendEvidence]:
    """Method, URL and evidence of an httpx/httpx2 request (read, never modified)."""
    method = str(request.method)
    url = str(request.url)
    try:
        body: bytes | None = bytes(request.content)
    except Exception:  # a streamed body is not in memory: no digest of it
        body = None
    retry_count = _int_header(request.headers.get(SDK_RETRY_COUNT_HEADER))
    return (
        method,
        url,
        SendEvidence(
            digest=send_digest(method, url, body),
            retry_count=retry_count,
            retry_layer=Layer.SDK if retry_count is not None else None,
        ),
    )


def _answered(response: Any) -> tuple[int, Headers]:
    return int(response.status_code), response.headers.get


def _default_transport(request: Any, *, asynchronous: bool) -> Any:
    """A default transport of the library ``request`` belongs to (httpx or httpx2)."""
    library = type(request).__module__.partition(".")[0]
    if library not in LIBRARIES:
        raise TypeError(f"not an httpx or httpx2 request: {type(request)!r}")
    module = importlib.import_module(library)
    return module.AsyncHTTPTransport() if asynchronous else module.HTTPTransport()


class _Counted:
    _options: SendOptions

    @property
    def errors(self) -> int:
        """Sends whose span bookkeeping failed (contained: the request still went out)."""
        return self._options.errors


class RetryscopeTransport(_Counted):
    """A sync transport for ``httpx.Client`` and ``httpx2.Client``: one span per send.

    ``wrapped`` is the transport that sends (of the client's library; default: that
    library's ``HTTPTransport()``, made on the first request). ``route``/``route_release``
    name the destination of sends outside an attempt; ``tracer_provider`` is used for
    sends outside a logical request.
    """

    def __init__(self, wrapped: Any = None, **options: Any) -> None:
        self.wrapped = wrapped
        self._options = SendOptions(scope_name="retryscope.httpx", **options)

    def handle_request(self, request: Any) -> Any:
        inner = self.wrapped
        if inner is None:
            inner = self.wrapped = _default_transport(request, asynchronous=False)
        send = start_send(self._options, *request_evidence(request))
        return through(send, lambda: inner.handle_request(request), _answered)

    def close(self) -> None:
        if self.wrapped is not None:
            self.wrapped.close()

    def __enter__(self) -> RetryscopeTransport:
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
        send = start_send(self._options, *request_evidence(request))
        return await athrough(send, lambda: inner.handle_async_request(request), _answered)

    async def aclose(self) -> None:
        if self.wrapped is not None:
            await self.wrapped.aclose()

    async def __aenter__(self) -> AsyncRetryscopeTransport:
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

_PATCHED: Final = (("Client", False), ("AsyncClient", True))


def _sync_send(
    wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    request = args[0] if args else kwargs["request"]
    send = start_send(CLIENT_OPTIONS, *request_evidence(request))
    return through(send, lambda: wrapped(*args, **kwargs), _answered)


async def _async_send(
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    request = args[0] if args else kwargs["request"]
    send = start_send(CLIENT_OPTIONS, *request_evidence(request))
    return await athrough(send, lambda: wrapped(*args, **kwargs), _answered)


def patch_clients(library: str) -> None:
    """Record every send of every client of ``library`` (``httpx`` or ``httpx2``)."""
    from wrapt import wrap_function_wrapper

    for cls, asynchronous in _PATCHED:
        wrap_function_wrapper(
            library, f"{cls}._send_single_request", _async_send if asynchronous else _sync_send
        )


def unpatch_clients(library: str) -> None:
    """Undo :func:`patch_clients`."""
    from opentelemetry.instrumentation.utils import unwrap

    module = importlib.import_module(library)
    for cls, _ in _PATCHED:
        unwrap(getattr(module, cls), "_send_single_request")
