"""aiohttp integration: every send of every ``aiohttp.ClientSession`` is a visible transport
attempt, each try of aiohttp-retry too.

::

    session = aiohttp.ClientSession(middlewares=[middleware], trace_configs=[trace_config()])

or :class:`retryscope.instrumentation.RetryscopeInstrumentor`, which adds both to every
session created while it is on (it wraps ``ClientSession.__init__``, as the contrib
aiohttp-client instrumentation does; sessions made before keep what they had).

One ``session.request(...)`` can send several times: each redirect hop, and the resend
aiohttp makes itself when a kept-alive connection turns out closed (idempotent methods).
The ``TraceConfig`` signals ``on_request_start``/``on_request_end`` bracket all of them, so
the send is recorded by a client middleware (aiohttp >= 3.12, the last of the session's,
so it wraps only the connection and the request on the wire): called once per request on
the wire, each time a middleware before it calls its handler too. Its span is the send
(:mod:`._send`): status, Retry-After, a refused connection as ``unavailable``.

The trace config reads what a retry loop above the session says of the try it makes:
aiohttp-retry's ``RetryClient`` passes ``trace_request_ctx={"current_attempt": n}`` on each
try, so the send of try ``n`` is a resend (``n - 1``) of that call's first send by layer
``transport``, and try 1 of a new call is a new operation. An SDK's own
``x-stainless-retry-count`` wins over it.

With the contrib ``AioHttpClientInstrumentor`` on, its span (opened in ``on_request_start``)
wraps all the sends of one request: the first send beneath it makes it a call.

A request given its own ``middlewares=`` replaces the session's, retryscope's too: aiohttp
calls no middleware of the session for it, and its sends are not recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, Final

import aiohttp
from aiohttp.payload import BytesPayload

from retryscope.instrumentation._containment import contained
from retryscope.instrumentation._sends import SendEvidence
from retryscope.instrumentation.integrations._send import (
    SendOptions,
    athrough,
    http_evidence,
    start_send,
)
from retryscope.vocabulary import Layer

__all__ = ["OPTIONS", "instrument", "middleware", "trace_config", "uninstrument"]

OPTIONS: Final = SendOptions(scope_name="retryscope.aiohttp")
"""Options of the sends this integration records (its error count)."""

TRY_KEY: Final = "current_attempt"
"""The ``trace_request_ctx`` key aiohttp-retry numbers its tries with (1-based)."""

_TRY: ContextVar[int | None] = ContextVar("retryscope_aiohttp_try", default=None)
"""The try a retry loop above the session makes in this context (while its request runs)."""


async def _evidence(request: aiohttp.ClientRequest) -> tuple[str, str, SendEvidence]:
    """Method, URL and evidence of one request on the wire (read, never modified)."""
    method, url = request.method, str(request.url)
    body = request.body
    data = await body.as_bytes() if isinstance(body, BytesPayload) else None
    evidence = http_evidence(method, url, b"" if body == b"" else data, request.headers.get)
    tried = _TRY.get()
    if evidence.retry_count is None and tried is not None:
        evidence = replace(evidence, retry_count=tried - 1, retry_layer=Layer.TRANSPORT)
    return method, url, evidence


def _answered(response: aiohttp.ClientResponse) -> tuple[int, Callable[[str], str | None]]:
    return response.status, response.headers.get


async def middleware(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """An aiohttp client middleware recording each request it hands on as one send."""
    try:
        method, url, evidence = await _evidence(request)
    except Exception:  # the request still goes out, unrecorded
        OPTIONS.errors += 1
        return await handler(request)
    send = start_send(OPTIONS, method, url, evidence)
    return await athrough(send, lambda: handler(request), _answered)


@contained("aiohttp: a request starts")
def _note_try(context: SimpleNamespace) -> None:
    tries = getattr(context, "trace_request_ctx", None)
    tried = tries.get(TRY_KEY) if isinstance(tries, Mapping) else None
    if type(tried) is int and tried >= 1:
        context.retryscope_try = _TRY.set(tried)


@contained("aiohttp: a request ends")
def _forget_try(context: SimpleNamespace) -> None:
    token: Token[int | None] | None = getattr(context, "retryscope_try", None)
    if token is not None:
        try:
            _TRY.reset(token)
        except ValueError:  # ended in another context than it started in
            _TRY.set(None)


async def _on_request_start(_session: object, context: SimpleNamespace, _params: object) -> None:
    _note_try(context)


async def _on_request_done(_session: object, context: SimpleNamespace, _params: object) -> None:
    _forget_try(context)


def trace_config() -> aiohttp.TraceConfig:
    """A ``TraceConfig`` that tells :func:`middleware` which try of a retry loop above the
    session (aiohttp-retry) each request is. One per session."""
    config = aiohttp.TraceConfig()
    config.on_request_start.append(_on_request_start)
    config.on_request_end.append(_on_request_done)
    config.on_request_exception.append(_on_request_done)
    return config


def _init(
    wrapped: Callable[..., None], _instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    kwargs["middlewares"] = (*(kwargs.get("middlewares") or ()), middleware)
    kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or ()), trace_config()]
    wrapped(*args, **kwargs)


def instrument() -> None:
    """Record every send of every ``ClientSession`` created from now on."""
    from wrapt import wrap_function_wrapper

    if not hasattr(aiohttp, "ClientMiddlewareType"):
        raise RuntimeError(f"aiohttp {aiohttp.__version__} has no client middlewares: need 3.12")
    wrap_function_wrapper(aiohttp.ClientSession, "__init__", _init)


def uninstrument() -> None:
    """Undo :func:`instrument` (for sessions created from now on)."""
    from opentelemetry.instrumentation.utils import unwrap

    unwrap(aiohttp.ClientSession, "__init__")
